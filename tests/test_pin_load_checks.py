"""What a ``[[pin]]`` table's load checks against the installed FlashInfer's sources (issue 28):
a runner or op name one letter off FlashInfer's is refused with the name it misspells, a name
like none of FlashInfer's (a consumer's own runner, defined later) loads with one warning, and
a tactic outside the bounds FlashInfer's sources declare for its runner is refused; ``pins
check`` calls a device it cannot know unchecked, and arch names no CUDA or FlashInfer release
has are refused wherever they enter."""

from __future__ import annotations

import logging

import pytest

import fi_patches
from fi_patches.cli import main
from fi_patches.compat.target import KNOWN_ARCHS, target_device
from fi_patches.pins import PinTable, PinTableError
from tests.conftest import require_release_supports

RUNNER, OP = "CublasltBf16GemmRunner", "bf16_gemm"


def lockfile(
    tmp_path, *, runner=RUNNER, op=OP, tactic="3", on_invalid=None, device="*", name="lock.toml"
):
    """A one-entry lockfile of FlashInfer's cuBLASLt bf16 GEMM, with the given fields."""
    meta = f"on_invalid = '{on_invalid}'\n" if on_invalid else ""
    path = tmp_path / name
    path.write_text(
        f"[meta]\ndevice = '{device}'\nflashinfer = '*'\n{meta}"
        f"[[pin]]\nop = '{op}'\nrunner = '{runner}'\n"
        "shapes = [['rows', 4096], [4096, 7168]]\nmin_rows = 1\nmax_rows = 16\n"
        f"tactic = {tactic}\n"
    )
    return path


def load(path):
    with fi_patches.pinned_tactics(path) as active:
        return active


@pytest.fixture
def pinned_ops(sm103):
    require_release_supports("pinned_ops")
    return sm103


def test_a_misspelt_runner_is_refused_at_load_naming_the_one_it_misspells(pinned_ops, tmp_path):
    path = lockfile(tmp_path, runner="CublasLtBf16GemmRunner")
    with pytest.raises(PinTableError) as raised:
        load(path)
    [problem] = raised.value.problems
    assert (problem.where, problem.field, problem.value) == (
        "[[pin]] #1",
        "runner",
        "CublasLtBf16GemmRunner",
    )
    assert "did you mean CublasltBf16GemmRunner?" in problem.message
    assert load(lockfile(tmp_path, name="right.toml")) is not None  # the right spelling loads


def test_process_wide_pins_with_a_misspelt_runner_leave_flashinfer_stock_with_one_error(
    pinned_ops, tmp_path, monkeypatch, caplog
):
    """``FI_PATCHES_PINS`` + ``fi_patches.auto`` (``enable()``, as the start-up hook calls it):
    the table is refused with one error naming the misspelling, not pinned with an INFO line."""
    import flashinfer  # noqa: F401  (enable() applies at once where FlashInfer is imported)

    path = lockfile(tmp_path, runner="CublasLtBf16GemmRunner")
    monkeypatch.setenv("FI_PATCHES_PINS", str(path))
    try:
        with caplog.at_level(logging.INFO, logger="fi_patches"):
            fi_patches.enable()
        outcome = fi_patches.activation.outcome()
    finally:
        fi_patches.disable()
    assert outcome.startswith("left FlashInfer stock") and "CublasLtBf16GemmRunner" in outcome
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "did you mean CublasltBf16GemmRunner?" in errors[0]


def test_a_misspelt_op_of_a_flashinfer_runner_is_refused_at_load(pinned_ops, tmp_path):
    with pytest.raises(PinTableError) as raised:
        load(lockfile(tmp_path, op="bf16_gem"))
    [problem] = raised.value.problems
    assert (problem.field, problem.value) == ("op", "bf16_gem")
    assert "did you mean bf16_gemm?" in problem.message


def test_under_on_invalid_tune_a_misspelt_runner_is_dropped_with_one_warning(
    pinned_ops, tmp_path, caplog
):
    path = lockfile(tmp_path, runner="CublasLtBf16GemmRunner", on_invalid="tune")
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        active = load(path)
    assert active is None or not active.entries("pin")  # nothing of it is left to pin
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "did you mean CublasltBf16GemmRunner?" in warned[0]


def test_a_runner_like_none_of_flashinfers_loads_with_one_warning_naming_it(
    pinned_ops, tmp_path, caplog
):
    path = lockfile(tmp_path, runner="AcmeSplitKernelRunner", op="acme_gemm")
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        active = load(path)
        again = load(path)
    assert active is not None and [e.runner for e in active.entries("pin")] == [
        "AcmeSplitKernelRunner"
    ]
    assert again is not None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "runner AcmeSplitKernelRunner" in warned[0]


@pytest.mark.parametrize("tactic", ["99999999999999999999", "-7", '"3"', "100", "[3]", "true"])
def test_a_cublaslt_tactic_outside_flashinfers_bounds_is_refused_at_load(
    pinned_ops, tmp_path, tactic
):
    with pytest.raises(PinTableError) as raised:
        load(lockfile(tmp_path, tactic=tactic))
    [problem] = raised.value.problems
    assert problem.field == "tactic"
    assert "must be an integer 0..99" in problem.message
    assert "_CUBLASLT_MAX_ALGOS = 100 (flashinfer/gemm/gemm_base.py)" in problem.message


@pytest.mark.parametrize("tactic", ["0", "99"])
def test_a_cublaslt_tactic_within_the_bounds_loads(pinned_ops, tmp_path, tactic):
    active = load(lockfile(tmp_path, tactic=tactic))
    assert active is not None and active.entries("pin")[0].tactic == int(tactic)


def test_pins_check_calls_an_out_of_bounds_tactic_invalid(tmp_path, capsys):
    require_release_supports("pinned_ops")
    assert main(["pins", "check", str(lockfile(tmp_path, tactic="-7"))]) == 1
    assert "tactic = -7: must be an integer 0..99" in capsys.readouterr().out


def test_pins_check_without_a_known_device_is_unchecked_not_invalid(tmp_path, capsys):
    """On CPU with no ``FI_PATCHES_DEVICE``, a table chosen on sm_103 cannot be judged for this
    device: exit 3 (unchecked), never 1 (invalid)."""
    require_release_supports("pinned_ops")
    if target_device().arch is not None:
        pytest.skip(f"this machine's device is known ({target_device().arch})")
    assert main(["pins", "check", str(lockfile(tmp_path, device="sm_103"))]) == 3
    out = capsys.readouterr().out
    assert "meta: unchecked: pins in" in out and "there is no CUDA device" in out
    assert "invalid" not in out


def test_pins_record_refuses_an_arch_no_release_names(tmp_path, capsys):
    out = tmp_path / "pins.toml"
    code = main(
        [
            "pins",
            "record",
            "--from",
            str(tmp_path / "c.json"),
            "--out",
            str(out),
            *("--device", "sm_999"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "--device 'sm_999' names no arch of any CUDA or FlashInfer release (known: sm_10," in err
    assert all(arch in err for arch in ("sm_90", "sm_100", "sm_103", "sm_120"))


@pytest.mark.parametrize("arch", ["sm_999", "sm_104a", "sm_99"])
def test_an_unknown_arch_is_refused_wherever_it_enters(tmp_path, monkeypatch, arch):
    with pytest.raises(PinTableError) as raised:
        PinTable.from_mapping({"meta": {"device": arch, "flashinfer": "*"}}, "t.json")
    [problem] = raised.value.problems
    assert (problem.field, problem.value) == ("device", arch)
    assert problem.message.startswith(
        "names no arch of any CUDA or FlashInfer release (known: sm_10,"
    )

    monkeypatch.setenv("FI_PATCHES_DEVICE", arch)
    device = target_device()
    assert (
        device.arch is None
        and f"FI_PATCHES_DEVICE='{arch}' names no arch of any CUDA or FlashInfer release"
        in (device.detail)
    )


@pytest.mark.parametrize("arch", KNOWN_ARCHS)
def test_every_known_arch_is_accepted(arch):
    for spelling in (arch, arch + "a", arch.replace("_", "").upper()):
        table = PinTable.from_mapping({"meta": {"device": spelling, "flashinfer": "*"}})
        assert table.meta.device == arch
