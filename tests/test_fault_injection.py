"""Broken or missing FlashInfer internals disable the feature with the right reason, and
fi_patches itself never raises (FAULT INJECTION: a fake FlashInfer in a temp dir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fi_patches.compat.features import feature
from tests.fake_flashinfer import DSL_RELEASE, run_fi_patches, write_fake
from tests.forkserver import ForkServer
from tests.isolated_site import isolated_site, run_cli


def doctor(
    server: ForkServer,
    tmp_path: Path,
    fault: str,
    version: str = "0.7.4",
    dsl: str = DSL_RELEASE,
    **env: str,
) -> dict:
    """``doctor --json`` over a fake FlashInfer with ``fault`` (a fork of the fork server):
    the pinned_tactics record, checked to name the fake's releases and the device."""
    root = write_fake(tmp_path / fault, fault, version, dsl)
    env = {"FI_PATCHES_DEVICE": "sm_103", **env}
    result = run_fi_patches(["doctor", "--json"], root, env, server)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    records = {r["name"]: r for r in json.loads(result.stdout)}
    record = records["pinned_tactics"]
    assert record["flashinfer"] == version
    assert record["cute_dsl"] == dsl
    assert record["device"] == "sm_103"
    return record


def flashinfer_probes(name: str) -> int:
    """How many of ``name``'s internals are FlashInfer's (not the CuTe DSL's)."""
    return sum(not i.path.startswith("cutlass.") for i in feature(name).internals())


def test_the_healthy_fake_passes_every_probe_and_the_self_check(tmp_path, forkserver):
    record = doctor(forkserver, tmp_path, "healthy")
    assert record["enabled"], record["reason"]
    assert all(p["ok"] for p in record["probes"])


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (
            "module_missing",
            "lacks an internal it needs: flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm "
            "is not importable (ModuleNotFoundError",
        ),
        (
            "autotune_tactics_renamed",
            "low_latency_blockscaled_gemm.autotune_tactics is missing (AttributeError",
        ),
        (
            "autotune_tactics_signature",
            "autotune_tactics changed signature: expected (problem_sizes_mnkl, a_dtype, b_dtype, "
            "sf_dtype, sf_vec_size, c_dtype, ...), found (problem, dtypes)",
        ),
        (
            "import_raises",
            "import flashinfer failed (RuntimeError: CUDA driver library libcuda.so.1 not found), "
            "so every patch is off.",
        ),
        (
            "runner_class_moved",
            "_cutedsl_low_latency_blockscaled_gemm_runner no longer defines class "
            "CutedslLowLatencyBlockscaledGemmRunner (FlashInfer changed how it binds this runner)",
        ),
        (
            "runner_method_per_instance",
            "self-check failed on FlashInfer 0.7.4 and CuTe DSL 4.8.1: with (128, 8, 1, 2) "
            "pinned the real runner "
            "offered 2 tactics, so the patch does not reach it",
        ),
    ],
)
def test_a_fault_disables_the_feature_with_its_reason(tmp_path, fault, reason, forkserver):
    record = doctor(forkserver, tmp_path, fault)
    assert not record["enabled"]
    assert reason in record["reason"], record["reason"]


def test_a_newer_release_is_disabled_unless_allowed(tmp_path, forkserver):
    record = doctor(forkserver, tmp_path, "healthy", version="0.7.5")
    assert not record["enabled"]
    assert "0.7.5 is newer than the verified range" in record["reason"]
    count = flashinfer_probes("pinned_tactics")
    assert f"all {count} probes pass; set FI_PATCHES_ALLOW_UNVERIFIED=1" in record["reason"]
    allowed = doctor(
        forkserver,
        tmp_path / "allowed",
        "healthy",
        version="0.7.5",
        FI_PATCHES_ALLOW_UNVERIFIED="1",
    )
    assert allowed["enabled"]
    assert (
        "unverified" in allowed["reason"] and "FI_PATCHES_ALLOW_UNVERIFIED=1" in allowed["reason"]
    )


def test_a_release_no_matrix_cell_ran_is_enabled_and_says_so(tmp_path, forkserver):
    from fi_patches.internals.flashinfer import FLASHINFER

    assert "0.7.3" not in FLASHINFER.releases  # vLLM 0.34.0's pin, never on this registry
    record = doctor(forkserver, tmp_path, "healthy", version="0.7.3")
    count = len(feature("pinned_tactics").internals())
    assert record["enabled"] and record["in_matrix"] is False
    assert record["reason"] == (
        "FlashInfer 0.7.3 is not in the compat matrix; between verified 0.7.2.post1 and 0.7.4; "
        f"{count} probes and the self-check pass."
    )
    root = write_fake(tmp_path / "table", "healthy", "0.7.3")
    table = run_fi_patches(["doctor"], root, {"FI_PATCHES_DEVICE": "sm_103"}, forkserver).stdout
    header = ["feature", "state", "flashinfer", "cute", "dsl", "in", "matrix"]
    assert table.splitlines()[0].split()[:7] == header
    row = next(line for line in table.splitlines() if line.startswith("pinned_tactics "))
    assert row.split()[1:5] == ["enabled", "0.7.3", DSL_RELEASE, "no"]
    listed = doctor(forkserver, tmp_path / "listed", "healthy", version="0.7.4")
    assert listed["in_matrix"] is True
    assert listed["reason"].startswith(f"FlashInfer 0.7.4 and CuTe DSL {DSL_RELEASE} are verified")


def test_a_dsl_release_no_matrix_cell_ran_is_enabled_and_says_so(tmp_path, forkserver):
    """The DSL's releases enter the verdict as FlashInfer's do: 4.8.0 and 4.8.1 are what the
    matrix's DSL cells ran; 4.9.0 (inside the range FlashInfer requires) enables with a reason
    saying no cell ran it, and doctor shows it."""
    from fi_patches.internals.cute_dsl import CUTE_DSL

    assert CUTE_DSL.releases == ("4.8.0", "4.8.1")
    count = len(feature("pinned_tactics").internals())
    record = doctor(forkserver, tmp_path, "healthy", dsl="4.9.0")
    assert record["enabled"] and record["in_matrix"] is False
    assert record["reason"] == (
        f"CuTe DSL 4.9.0 is not in the compat matrix; after verified 4.8.1; {count} probes and "
        "the self-check pass."
    )
    root = write_fake(tmp_path / "table", "healthy", "0.7.4", "4.9.0")
    result = run_fi_patches(["doctor"], root, {"FI_PATCHES_DEVICE": "sm_103"}, forkserver)
    row = next(line for line in result.stdout.splitlines() if line.startswith("pinned_tactics "))
    assert row.split()[1:6] == ["enabled", "0.7.4", "4.9.0", "no", "sm_103"]
    both = doctor(forkserver, tmp_path / "both", "healthy", version="0.7.3", dsl="4.9.0")
    assert both["enabled"] and both["in_matrix"] is False
    assert both["reason"] == (
        "FlashInfer 0.7.3 is not in the compat matrix; between verified 0.7.2.post1 and 0.7.4; "
        f"CuTe DSL 4.9.0 is not in the compat matrix; after verified 4.8.1; {count} probes and "
        "the self-check pass."
    )


@pytest.mark.parametrize("dsl", ["4.8.0", "4.8.1"])
def test_a_dsl_release_the_matrix_ran_is_verified(tmp_path, dsl, forkserver):
    record = doctor(forkserver, tmp_path, "healthy", dsl=dsl)
    count = len(feature("pinned_tactics").internals())
    assert record["enabled"] and record["in_matrix"] is True
    assert record["reason"] == (
        f"FlashInfer 0.7.4 and CuTe DSL {dsl} are verified; {count} probes and the self-check pass."
    )


def test_a_dsl_older_than_flashinfer_requires_is_disabled(tmp_path, forkserver):
    record = doctor(forkserver, tmp_path, "healthy", dsl="4.7.0")
    dsl_probes = len(feature("pinned_tactics").internals()) - flashinfer_probes("pinned_tactics")
    assert not record["enabled"]
    assert record["reason"] == (
        f"CuTe DSL 4.7.0 is outside the verified range >=4.8.0 (all {dsl_probes} probes pass)."
    )


@pytest.mark.parametrize(
    ("version", "where"), [("0.7.5rc1", "newer than"), ("0.7.4rc1", "outside")]
)
def test_prereleases_are_not_the_release(tmp_path, version, where, forkserver):
    record = doctor(forkserver, tmp_path, "healthy", version=version)
    assert not record["enabled"]
    assert f"{version} is {where} the verified range" in record["reason"]


def test_an_unverified_release_with_a_broken_internal_stays_disabled_when_allowed(
    tmp_path, forkserver
):
    record = doctor(
        forkserver,
        tmp_path,
        "autotune_tactics_renamed",
        version="0.8.0",
        FI_PATCHES_ALLOW_UNVERIFIED="1",
    )
    assert not record["enabled"]
    assert "autotune_tactics is missing" in record["reason"]


def test_without_flashinfer_fi_patches_imports_and_reports(tmp_path):
    site = isolated_site(tmp_path, ["fi_patches", "packaging"])
    result = run_cli(site, ["doctor", "--json"], tmp_path)
    assert result.returncode == 0, result.stderr
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert not records["pinned_ops"]["enabled"]
    assert records["pinned_ops"]["device"] == "any"  # no device needed: none is asked for
    record = records["pinned_tactics"]
    assert not record["enabled"]
    assert record["reason"] == "FlashInfer (flashinfer-python) is not installed."
    assert record["flashinfer"] == "not installed"
    assert record["device"].startswith("none (torch is not importable")
