"""The compat layer's pieces: version gates, device detection, probes, status and doctor."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import fi_patches
from fi_patches.cli import main
from fi_patches.compat.target import (
    current_device,
    is_newer_than,
    is_verified,
    normalize_arch,
    parse_specifier,
)
from fi_patches.internals import ATTRIBUTE, CALLABLE, FACTORY, METHOD, MODULE, Internal
from tests.conftest import flashinfer_or_skip, require_release_supports

VERIFIED = SpecifierSet(">=0.7.0,<=0.7.4")


@pytest.mark.parametrize(
    ("version", "verified", "newer"),
    [
        ("0.7.0", True, False),
        ("0.7.2.post1", True, False),
        ("0.7.4", True, False),
        ("0.7.4+cu130", True, False),
        ("0.7.4rc1", False, False),
        ("0.7.4.post1", False, True),
        ("0.7.5rc1", False, True),
        ("0.7.5", False, True),
        ("0.6.18.post1", False, False),
        ("0.7.4.dev3", False, False),
    ],
)
def test_verified_range_is_prerelease_aware(version, verified, newer):
    assert is_verified(Version(version), VERIFIED) is verified
    assert is_newer_than(Version(version), VERIFIED) is newer


def test_a_specifier_naming_a_prerelease_admits_it():
    assert is_verified(Version("0.8.0rc2"), SpecifierSet(">=0.8.0rc1,<0.9"))
    with pytest.raises(ValueError, match=r"'0\.7' is not a version specifier"):
        parse_specifier("0.7")


@pytest.mark.parametrize(
    ("text", "arch"),
    [
        ("sm_103", "sm_103"),
        ("SM103", "sm_103"),
        ("sm_100a", "sm_100"),
        ("sm_90", "sm_90"),
        ("blackwell", None),
        ("103", None),
    ],
)
def test_arch_names(text, arch):
    assert normalize_arch(text) == arch


def test_device_env_overrides_and_rejects_nonsense(monkeypatch):
    monkeypatch.setenv("FI_PATCHES_DEVICE", "sm_103a")
    device = current_device()
    assert (device.arch, device.sm_version, device.source) == ("sm_103", 103, "env")
    monkeypatch.setenv("FI_PATCHES_DEVICE", "b200")
    device = current_device()
    assert device.arch is None and "FI_PATCHES_DEVICE='b200' is not an arch" in device.detail
    monkeypatch.delenv("FI_PATCHES_DEVICE")
    device = current_device()
    import torch

    if torch.cuda.is_available():  # a real GPU (e.g. the lent H200): its own arch
        major, minor = torch.cuda.get_device_capability()
        assert (device.arch, device.source) == (f"sm_{major}{minor}", "torch.cuda")
    else:
        assert device.arch is None and device.detail == "no CUDA device"


def test_probes_against_the_real_flashinfer():
    require_release_supports("pinned_tactics")
    base = "flashinfer.gemm.gemm_base"
    assert Internal("m", MODULE, base).probe() is None
    assert (
        "is not importable (ModuleNotFoundError" in Internal("m", MODULE, "flashinfer.nope").probe()
    )
    mm = ("a", "b", "a_descale", "b_descale")
    assert Internal("mm", CALLABLE, base, "mm_mxfp8", params=mm).probe() is None
    changed = Internal("mm", CALLABLE, base, "mm_mxfp8", params=("a", "weight")).probe()
    assert changed.startswith(
        f"{base}.mm_mxfp8 changed signature: expected (a, weight, ...), found (a, b,"
    )
    assert "is missing (AttributeError" in Internal("x", CALLABLE, base, "mm_mxfp9").probe()
    assert "is not callable" in Internal("x", CALLABLE, base, "DEFAULT_WORKSPACE_SIZE").probe()
    assert Internal("x", ATTRIBUTE, base, "DEFAULT_WORKSPACE_SIZE").probe() is None
    search = Internal(
        "s", METHOD, "flashinfer.autotuner", "AutoTuner.search_cache", params=("custom_op",)
    )
    assert search.probe() is None
    factory = "_cutedsl_low_latency_blockscaled_gemm_runner"
    probe = Internal("f", FACTORY, base, factory, builds="NoSuchRunner")
    assert "no longer defines class NoSuchRunner" in probe.probe()
    method = Internal(
        "f",
        FACTORY,
        base,
        factory,
        builds="CutedslLowLatencyBlockscaledGemmRunner",
        methods=("tune",),
    )
    assert "no longer defines tune" in method.probe()
    wrong = Internal("w", ATTRIBUTE, base, "DEFAULT_WORKSPACE_SIZE", check=lambda v: "too small")
    assert wrong.probe() == f"{base}.DEFAULT_WORKSPACE_SIZE misbehaves: too small"


def test_status_has_one_record_per_feature_with_the_fields():
    records = fi_patches.status()
    from fi_patches.compat.features import FEATURES

    assert [r.name for r in records] == [f.name for f in FEATURES]
    assert records[0].name == "pinned_ops"
    for record in records:
        data = record.to_dict()
        assert set(data) >= {"name", "enabled", "reason", "flashinfer", "device", "probes", "pins"}
        assert data["reason"].endswith(".")


def test_status_enabled_on_simulated_sm103(sm103):
    require_release_supports("pinned_tactics")
    record = {r.name: r for r in fi_patches.status()}["pinned_tactics"]
    assert record.enabled, record.reason
    assert record.device == "sm_103"
    assert record.pins == "no pins (FI_PATCHES_PINS unset and none registered)"


def test_status_reports_a_bad_pins_file(sm103, tmp_path, monkeypatch):
    path = tmp_path / "pins.toml"
    path.write_text("[meta]\ndevice = 'sm_103'\n")
    monkeypatch.setenv("FI_PATCHES_PINS", str(path))
    record = {r.name: r for r in fi_patches.status()}["pinned_tactics"]
    assert record.pins == f"FI_PATCHES_PINS is invalid: {path}: [meta]: flashinfer: is required"


def test_status_reports_a_table_chosen_on_another_device(sm103, tmp_path, monkeypatch):
    flashinfer_or_skip()
    path = tmp_path / "pins.toml"
    path.write_text(
        "[meta]\ndevice = 'sm_100'\nflashinfer = '>=0.7'\n"
        "[[low_latency]]\nn = 7168\nk = 1536\nmin_rows = 5\nmax_rows = 8\ntactic = [128, 8, 1, 1]\n"
    )
    monkeypatch.setenv("FI_PATCHES_PINS", str(path))
    record = {r.name: r for r in fi_patches.status()}["pinned_tactics"]
    assert record.pins == (
        f"1 [[low_latency]] entry from {path} skipped: pins in {path} were chosen on sm_100; "
        "this device is sm_103"
    )


def test_status_judges_a_lockfile_of_a_feature_of_any_device_against_the_target_device(
    tmp_path, monkeypatch
):
    """``pinned_ops`` runs on any device, so its record's device says "any"; whether its
    ``[[pin]]`` entries apply is still decided by the device they would run on."""
    flashinfer_or_skip()
    path = tmp_path / "lock.toml"
    path.write_text(
        "[meta]\ndevice = 'sm_90'\nflashinfer = '>=0.7'\n"
        "[[pin]]\nop = 'bf16_gemm'\nrunner = 'CublasltBf16GemmRunner'\n"
        "shapes = [['rows', 64], [64, 32]]\nmin_rows = 1\nmax_rows = 8\ntactic = 1\n"
    )
    monkeypatch.setenv("FI_PATCHES_PINS", str(path))
    monkeypatch.setenv("FI_PATCHES_DEVICE", "sm_90")
    record = {r.name: r for r in fi_patches.status()}["pinned_ops"]
    assert record.pins == f"1 [[pin]] entry from {path}"
    monkeypatch.setenv("FI_PATCHES_DEVICE", "sm_103")
    record = {r.name: r for r in fi_patches.status()}["pinned_ops"]
    assert record.pins == (
        f"1 [[pin]] entry from {path} skipped: pins in {path} were chosen on sm_90; "
        "this device is sm_103"
    )


def test_status_counts_and_names_sections_in_english(sm103, tmp_path, monkeypatch):
    """Sections by their table names and counted nouns that agree: not "no pin pins"."""
    flashinfer_or_skip()
    path = tmp_path / "pins.toml"
    entry = "[[low_latency]]\nn = 7168\nk = 1536\nmin_rows = {0}\nmax_rows = {0}\ntactic = [128, 8, 1, 1]\n"
    path.write_text(
        "[meta]\ndevice = 'sm_103'\nflashinfer = '>=0.7'\n" + entry.format(5) + entry.format(6)
    )
    monkeypatch.setenv("FI_PATCHES_PINS", str(path))
    records = {r.name: r for r in fi_patches.status()}
    assert records["pinned_ops"].pins == f"no [[pin]] entries in {path}"
    if records["pinned_tactics"].enabled:
        assert records["pinned_tactics"].pins == f"2 [[low_latency]] entries from {path}"


def test_doctor_prints_a_table_and_json_and_exits_zero(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == [
        "feature",
        "state",
        "flashinfer",
        "cute",
        "dsl",
        "in",
        "matrix",
        "device",
        "reason",
    ]
    assert "pinned_tactics" in out
    assert main(["doctor", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in records} >= {"pinned_tactics"}
    assert all(isinstance(r["enabled"], bool) and r["reason"] for r in records)


def test_import_fi_patches_imports_neither_torch_nor_flashinfer():
    code = (
        "import sys, fi_patches; "
        "print(sorted(m for m in ('torch', 'flashinfer', 'cutlass') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_device_setting_that_is_no_arch_reads_as_one_sentence(monkeypatch):
    monkeypatch.setenv("FI_PATCHES_DEVICE", "blackwell")
    fi_patches.refresh()
    flashinfer_or_skip()
    reason = {r.name: r for r in fi_patches.status()}["pinned_tactics"].reason
    assert (
        reason.startswith(
            "needs sm_100, sm_103 or sm_107, but FI_PATCHES_DEVICE='blackwell' is not an arch such "
            "as sm_103 ("
        )
        or "lacks an internal" in reason
        or "import flashinfer failed" in reason
    ), reason
    assert "but there is FI_PATCHES_DEVICE" not in reason


def test_every_feature_has_the_verdict_this_environment_expects(sm103):
    """Never skipped: each feature's state and reason, as doctor reports them on sm_103, match
    what compat/matrix.toml declares for this environment (the matrix cell it is, or the
    README's FlashInfer 0.7.4 on CPU); an environment that declares nothing fails."""
    from compat.matrix import check_doctor
    from fi_patches.overview import status
    from tests import expected

    cell, how = expected.environment_cell()
    assert cell is not None, how
    records = [r.to_dict() for r in status()]
    verdicts, problems = check_doctor(cell.expect, records)
    assert not problems, f"{how}:\n" + "\n".join(problems)
    assert {v.feature for v in verdicts} == set(expected.matrix().features)
