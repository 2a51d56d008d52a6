"""What "verified" means: the exact releases a compat matrix cell ran with the features on.
The one list (``FLASHINFER.releases``) and ``compat/matrix.toml`` are held to each other here, so
neither can change without the other."""

from __future__ import annotations

import pytest
from packaging.version import Version

from compat.matrix import NEWEST, load
from fi_patches.compat.versions import is_verified
from fi_patches.internals.flashinfer import FLASHINFER
from fi_patches.internals.names import PINNED_TACTICS

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


def test_every_verified_release_is_inside_the_enabled_range_and_bounds_it():
    releases = sorted(Version(r) for r in FLASHINFER.releases)
    assert all(is_verified(r, FLASHINFER.verified) for r in releases)
    bounds = {Version(s.version) for s in FLASHINFER.verified}
    assert bounds == {releases[0], releases[-1]}  # the range spans exactly the verified ones
