"""What "verified" means: the exact releases a compat matrix cell ran with the features on.
The one list (``FLASHINFER.releases``) and ``compat/matrix.toml`` are held to each other here, so
neither can change without the other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.version import Version

from compat.matrix import NEWEST, load
from fi_patches.compat.target import is_verified
from fi_patches.internals import PINNED_TACTICS
from fi_patches.internals.cute_dsl import CUTE_DSL
from fi_patches.internals.flashinfer import FLASHINFER
from fi_patches.internals.sglang import SGLANG
from fi_patches.internals.vllm import VLLM

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.release_independent


def ran_enabled() -> set[str]:
    """The releases of the cells that expect FlashInfer's features on (they ran its code)."""
    matrix = load()
    return {
        c.flashinfer
        for c in matrix.cells
        if c.flashinfer != NEWEST and "enabled" in c.expect[PINNED_TACTICS].states
    }


def test_the_verified_releases_are_the_ones_the_matrix_ran():
    assert set(FLASHINFER.releases) == ran_enabled()
    assert len(set(FLASHINFER.releases)) == len(FLASHINFER.releases)


def test_the_verified_dsl_releases_are_the_ones_the_dsl_cells_ran():
    matrix = load()
    ran = {c.dsl for c in matrix.cells if c.dsl and "enabled" in c.expect[PINNED_TACTICS].states}
    assert set(CUTE_DSL.releases) == ran
    assert all(is_verified(Version(r), CUTE_DSL.verified) for r in CUTE_DSL.releases)


def test_every_verified_release_is_inside_the_enabled_range_and_bounds_it():
    releases = sorted(Version(r) for r in FLASHINFER.releases)
    assert all(is_verified(r, FLASHINFER.verified) for r in releases)
    bounds = {Version(s.version) for s in FLASHINFER.verified}
    assert bounds == {releases[0], releases[-1]}  # the range spans exactly the verified ones


@pytest.mark.parametrize("host", [VLLM, SGLANG], ids=lambda d: d.label)
def test_a_hosts_verified_release_is_the_one_its_nox_session_runs(host):
    """vLLM and SGLang are verified by their own nox session (the matrix installs neither)."""
    pinned = re.findall(rf'"{host.distribution}==([^"]+)"', (ROOT / "noxfile.py").read_text())
    assert host.releases == tuple(pinned)
    assert all(is_verified(Version(r), host.verified) for r in host.releases)
