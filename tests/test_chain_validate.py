"""``python -m fi_patches validate`` off Blackwell (here: CPU): exit 3, every check reported as
not run with the reason, markdown and JSON reports; and the float64 reference comparison."""

from __future__ import annotations

import json

import pytest
import torch

from fi_patches.chain.ops import mismatch, mxfp8_operand, reference_product
from fi_patches.chain.validate import (
    FAILED,
    NOT_RUN,
    _pin_checks,
    blackwell_reason,
    validate,
    wide_rows,
)
from fi_patches.cli import main
from fi_patches.pins.table import PinTable
from tests.chain_helpers import EXAMPLE, cpu_only

PINS = """
[meta]
device = "sm_103"
flashinfer = "==0.7.4"

[[low_latency]]
n = 6144
k = 1536
min_rows = 5
max_rows = 8
tactic = [128, 8, 1, 1]

[[wide]]
n = 6144
k = 1536
tile = 32
tactic = [128, 8, 1, 1]

[[cute_dsl]]
n = 6144
k = 1536
min_rows = 65
max_rows = 128
tactic = [[128, 64], [1, 1], false, false, 1]
"""

REASON = "not run: needs sm_100/sm_103 (torch sees no CUDA device)"


@pytest.fixture
def pins(tmp_path):
    path = tmp_path / "pins.toml"
    path.write_text(PINS)
    return path


@cpu_only
def test_off_blackwell_every_check_is_not_run_with_the_reason(sm103, pins, tmp_path, capsys):
    # FI_PATCHES_DEVICE=sm_103 targets Blackwell offline, but checks need the real device
    assert blackwell_reason() == "torch sees no CUDA device"
    out = tmp_path / "report.md"
    assert (
        main(["validate", "--pins", str(pins), "--chain", str(EXAMPLE), "--report", str(out)]) == 3
    )
    assert "0 passed, 0 failed, 12 not run" in capsys.readouterr().out
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["format"] == "fi_patches.validate/1" and data["device"] == "no CUDA device"
    assert data["summary"] == {"passed": 0, "failed": 0, "not run": 12}
    kinds = [(c["kind"], c["subject"]) for c in data["checks"]]
    assert kinds[:4] == [
        ("numerics", "[[low_latency]] #1 6144x1536 rows 5..8"),
        ("numerics", "[[cute_dsl]] #1 6144x1536 rows 65..128"),
        ("numerics", "[[wide]] #1 6144x1536 tile 32"),
        ("wide launches", "[[wide]] #1 6144x1536 tile 32"),
    ]
    assert kinds[4:] == [
        ("chain time", f"deepseek-v3-attention-tp4 rows {label}")
        for label in ("1", "2", "3..4", "5..8", "9..16", "17..32", "33..48", "65..128")
    ]
    assert {c["state"] for c in data["checks"]} == {NOT_RUN}
    assert {c["detail"] for c in data["checks"]} == {REASON}
    markdown = out.read_text()
    assert "| numerics | [[low_latency]] #1 6144x1536 rows 5..8 | not run | " + REASON in markdown
    assert "- result: 0 passed, 0 failed, 12 not run" in markdown


@cpu_only
def test_without_a_report_file_the_markdown_is_printed(pins, capsys):
    assert main(["validate", "--pins", str(pins)]) == 3
    printed = capsys.readouterr().out
    assert printed.startswith("# fi_patches validate")
    assert "- chain: none given" in printed and "| chain time |" not in printed  # not asked for


@cpu_only
def test_the_default_table_empty_means_no_pin_checks(capsys):
    assert main(["validate"]) == 3  # nothing checked is never a pass
    printed = capsys.readouterr().out
    assert "- pins: <empty>" in printed and "0 passed, 0 failed, 0 not run" in printed
    assert "No checks" in printed


def test_lockfile_entries_are_listed_as_checks_validate_does_not_run(pins, tmp_path, capsys):
    """A ``[[pin]]`` names a tuner key of any op: validate launches no kernel for it, so each
    is listed as not run with that reason (a lockfile alone can never read as validated)."""
    lock = tmp_path / "lock.toml"
    entry = (
        '[[pin]]\nop = "bf16_gemm"\nrunner = "CublasltBf16GemmRunner"\n'
        'shapes = [["rows", 4096], [4096, 7168]]\nmax_rows = 16\ntactic = 3\n'
    )
    lock.write_text(PINS + entry)
    assert main(["validate", "--pins", str(lock)]) == 3
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if "[[pin]] #1" in line)
    assert "| numerics | [[pin]] #1 bf16_gemm CublasltBf16GemmRunner | not run |" in row
    assert "a [[pin]] names a tuner key" in row and "sm_100" not in row
    only = tmp_path / "only.toml"
    only.write_text(PINS[: PINS.index("[[low_latency]]")] + entry)
    assert main(["validate", "--pins", str(only)]) == 3
    assert "0 passed, 0 failed, 1 not run" in capsys.readouterr().out


def test_bad_inputs_exit_1(tmp_path, pins, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(PINS.replace("tile = 32", "tile = 33"))
    assert main(["validate", "--pins", str(bad)]) == 1
    assert "tile = 33: must be a multiple of 8" in capsys.readouterr().err
    assert main(["validate", "--pins", str(pins), "--chain", str(tmp_path / "none.toml")]) == 1
    assert "none.toml: file: cannot be read" in capsys.readouterr().err


@cpu_only
def test_a_check_that_cannot_launch_fails_with_what_it_raised(pins, pinning):
    # what a check does where the launch is impossible: a failure naming the error, never a pass
    planned = _pin_checks(PinTable.from_file(pins))
    assert [c.state for c, _ in planned] == [NOT_RUN] * 4
    result = planned[0][1]()
    assert result.state == FAILED
    assert result.detail.startswith("raised AssertionError: Torch not compiled with CUDA")


def test_wide_tiles_are_launched_at_every_row_count_they_serve():
    assert [list(wide_rows(t)) for t in (16, 32, 48)] == [
        list(range(9, 17)),
        list(range(17, 33)),
        list(range(33, 49)),
    ]
    report = validate(PinTable.empty())
    assert report.checks == () and not report.failed  # no chain given: none is asked for


def test_operands_encode_their_float64_reference(pinning):
    values, scales, ref = mxfp8_operand(torch, 8, 64, seed=3)
    assert values.dtype == torch.float8_e4m3fn and scales.dtype == torch.uint8
    assert scales.numel() == 128 * 4  # rows padded to 128, K/32 scales padded to 4
    ratio = ref / values.to(torch.float64)
    finite = ratio[values.to(torch.float64) != 0]
    assert set(torch.log2(finite).round().unique().tolist()) <= {
        -3.0,
        -2.0,
        -1.0,
        0.0,
        1.0,
        2.0,
        3.0,
    }
    assert mxfp8_operand(torch, 8, 64, seed=3)[0].equal(values)  # seeded


def test_mismatch_against_the_reference():
    a = torch.randn(4, 64, dtype=torch.float64)
    w = torch.randn(16, 64, dtype=torch.float64)
    ref = reference_product(torch, a, w)
    assert mismatch(torch, ref.to(torch.bfloat16), ref) is None
    poisoned = ref.clone()
    poisoned[1, 2] = float("nan")
    assert mismatch(torch, poisoned, ref) == "1 outputs are NaN (left unwritten)"
    wrong = ref.clone()
    wrong[3, 5] += 1.0 + abs(float(ref[3, 5]))
    assert mismatch(torch, wrong, ref).startswith("1 of 64 outputs differ; worst at (3, 5)")
    assert mismatch(torch, ref[:2], ref) == "output shape (2, 16) is not (4, 16)"
