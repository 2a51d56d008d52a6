"""The CuTe DSL release enters the verdict of the features that compile or run CuTe DSL
kernels, against the real FlashInfer and the real DSL: the release a compat matrix cell ran is
verified, another release inside the range FlashInfer requires enables with a reason saying no
cell ran it, and doctor shows the DSL's release (``--json`` as ``cute_dsl``). The installed
DSL's release is reported through a distribution record first on the path (as a pip install of
another release would report it), the DSL's code unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fi_patches.compat import status_of
from fi_patches.compat.features import FEATURES, installed
from fi_patches.internals.cute_dsl import CUTE_DSL
from tests.conftest import require_release_supports
from tests.fake_flashinfer import run_fi_patches
from tests.forkserver import ForkServer

DSL_FEATURES = ("pinned_tactics", "pinned_cute_dsl", "wide_tile")


def test_the_features_that_run_cute_dsl_kernels_require_the_dsl():
    assert {f.name for f in FEATURES if CUTE_DSL in f.requires} == set(DSL_FEATURES)


def test_the_installed_dsl_is_judged_and_shown(sm103):
    require_release_supports("wide_tile")
    dsl = installed(CUTE_DSL)
    record = status_of("pinned_tactics")
    assert record.cute_dsl == dsl.version_text
    assert status_of("pinned_ops").cute_dsl == "-"
    listed = dsl.version_text in CUTE_DSL.releases
    assert record.in_matrix is listed
    if listed:
        assert record.reason.startswith(
            f"FlashInfer {record.flashinfer} and CuTe DSL {dsl.version_text} are verified; "
        )
    else:
        assert f"CuTe DSL {dsl.version_text} is not in the compat matrix; " in record.reason


def _doctor(server: ForkServer, tmp_path: Path, dsl: str) -> dict[str, dict]:
    dist = tmp_path / "site" / f"nvidia_cutlass_dsl-{dsl}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: nvidia-cutlass-dsl\nVersion: {dsl}\n"
    )
    env = {"FI_PATCHES_DEVICE": "sm_103", "FI_PATCHES_CACHE_DIR": "off"}
    result = run_fi_patches(["doctor", "--json"], dist.parent, env, server)
    assert result.returncode == 0, result.stderr[-2000:]
    return {r["name"]: r for r in json.loads(result.stdout)}


def test_a_dsl_release_no_cell_ran_enables_wide_tile_and_says_so(tmp_path, forkserver):
    require_release_supports("wide_tile")
    pytest.importorskip("cutlass")
    records = _doctor(forkserver, tmp_path, "4.9.0")
    wide = records["wide_tile"]
    assert wide["enabled"], wide["reason"]
    assert wide["cute_dsl"] == "4.9.0" and wide["in_matrix"] is False
    assert wide["reason"].startswith(
        f"CuTe DSL 4.9.0 is not in the compat matrix; after verified 4.8.1; "
        f"{len(wide['probes'])} probes and the self-check pass. Warning: upstream marks"
    )
    assert records["pinned_ops"]["cute_dsl"] == "-" and records["pinned_ops"]["in_matrix"]
