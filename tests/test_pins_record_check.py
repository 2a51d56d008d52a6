"""``pins record`` (tuner cache -> pin table) and ``pins check`` against the real FlashInfer."""

from __future__ import annotations

import json

import pytest
import torch

import fi_patches
from fi_patches.cli import main
from fi_patches.pins import PinTable
from fi_patches.tools.record import from_tuner, parse_file_key, read_cache, to_table
from tests import cutedsl, lowlat
from tests.conftest import require_release_supports
from tests.mxfp8_inputs import Mxfp8Problem

N, K = lowlat.SHAPE


def tune(backend: str, rows: int) -> None:
    import flashinfer

    with flashinfer.autotune(True), pytest.raises(Exception, match="CUDA"):
        flashinfer.mm_mxfp8(
            *Mxfp8Problem(N, K, rows).mm_args(), out_dtype=torch.bfloat16, backend=backend
        )


def test_parse_file_key_reads_op_runner_and_profile():
    key = (
        "('mxfp8_gemm', 'CutedslLowLatencyBlockscaledGemmRunner', ((8, 1536), (1536, 7168), (-1,)), "
        "(<class 'cutlass.base_dsl.typing.Float8E4M3FN'>, torch.bfloat16, True))"
    )
    parsed = parse_file_key(key)
    assert parsed is not None
    assert (parsed.op, parsed.runner, parsed.profile) == (
        "mxfp8_gemm",
        "CutedslLowLatencyBlockscaledGemmRunner",
        ((8, 1536), (1536, 7168), (-1,)),
    )
    assert parsed.extras == "(<class 'cutlass.base_dsl.typing.Float8E4M3FN'>, torch.bfloat16, True)"
    assert parsed.file_key == key  # FlashInfer's own spelling, back
    assert parse_file_key("not a key") is None


@pytest.mark.simulated
def test_cache_to_table_to_pinned_tuning_gives_the_same_tactics(both, tuner, tmp_path, capsys):
    from flashinfer.autotuner import AutoTuner

    tune("cutedsl_low_latency", 8)
    tune("cute-dsl", 64)
    tuned_ll = lowlat.cached_low_latency(tuner, N, K)
    tuned_cute = cutedsl.cached(tuner, N, K)
    cache = tmp_path / "cache.json"
    AutoTuner.get().save_configs(str(cache))
    out = tmp_path / "pins.toml"
    assert (
        main(["pins", "record", "--from", str(cache), "--out", str(out), "--device", "sm_103"]) == 0
    )
    assert "wrote" in capsys.readouterr().out
    table = PinTable.from_file(out)
    assert table.meta.device == "sm_103" and str(table.meta.flashinfer).startswith("==")
    from fi_patches.pinning.validate import mxfp8_bucket_of

    live = to_table(
        from_tuner(),
        device="sm_103",
        flashinfer_version="0.7.4",
        source="live",
        bucket_of=mxfp8_bucket_of(),
    )
    assert live.to_mapping()["low_latency"] == table.to_mapping()["low_latency"]
    assert live.to_mapping()["cute_dsl"] == table.to_mapping()["cute_dsl"]

    tuner.clear_cache()
    both.clear()
    with fi_patches.pinned_tactics(table):
        tune("cutedsl_low_latency", 8)
        tune("cute-dsl", 64)
    assert lowlat.cached_low_latency(tuner, N, K) == tuned_ll
    assert cutedsl.cached(tuner, N, K) == tuned_cute
    assert all(len(both.offered(rows, lowlat.LL_CLASS)) == 1 for rows in (1, 2, 4, 8))


V2_TUNE = """
import sys, pytest, torch
sys.path.insert(0, {root!r})
from tests import simulation
simulation.install(pytest.MonkeyPatch())  # SIMULATION: device-only helpers on CPU
import flashinfer
from tests.mxfp8_inputs import Mxfp8Problem
with flashinfer.autotune_v2(mode="tune", cache_root={store!r}):
    try:
        flashinfer.mm_mxfp8(*Mxfp8Problem({n}, {k}, 8).mm_args(), out_dtype=torch.bfloat16,
                            backend="cutedsl_low_latency")
    except AssertionError:
        pass  # the launch, on CPU
"""


@pytest.mark.simulated
def test_a_v2_store_records_like_a_v1_file(both, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import flashinfer

    if not hasattr(flashinfer, "autotune_v2"):
        pytest.skip("this FlashInfer has no autotune_v2")
    # A v2 store stays attached to the process that tuned with it (FlashInfer cannot detach
    # it before 0.7.4), so the tuning runs in a child process.
    root = tmp_path / "store"
    script = V2_TUNE.format(
        root=str(Path(__file__).resolve().parent.parent), store=str(root), n=N, k=K
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    entries, metadata = read_cache(root)
    assert metadata.get("flashinfer_version") == flashinfer.__version__
    from fi_patches.tools.record import section_of

    keys = [section_of(e.key) for e in entries]
    assert {(e.runner, k.n, k.k) for e, k in zip(entries, keys, strict=True) if k} == {
        (lowlat.LL_CLASS, N, K)
    }
    assert {k.bucket for k in keys if k} <= {1, 2, 4, 8} and entries


def write(tmp_path, text: str):
    path = tmp_path / "pins.toml"
    path.write_text('[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n' + text)
    return path


def test_check_reports_each_entry_and_exits_by_the_worst(pinning, tmp_path, capsys):
    good = lowlat.non_split_alternative(N, K, 8)
    path = write(
        tmp_path,
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(good)}\n\n"
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 1\nmax_rows = 3\ntactic = {list(good)}\n",
    )
    assert main(["pins", "check", str(path)]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("[[low_latency]]")]
    assert "OK" in lines[0].split()
    assert "invalid" in lines[1] and "split FlashInfer's tuner bucket of rows 3..4" in lines[1]

    path = write(
        tmp_path,
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(good)}\n",
    )
    assert main(["pins", "check", str(path)]) == 0
    assert "meta: OK" in capsys.readouterr().out


@pytest.mark.parametrize("any_release", ["*", ""])
def test_check_reads_flashinfer_star_or_empty_as_any_release(
    pinning, tmp_path, capsys, any_release
):
    path = tmp_path / "pins.toml"
    path.write_text(
        f'[meta]\ndevice = "sm_103"\nflashinfer = "{any_release}"\n\n'
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\n"
        f"tactic = {list(lowlat.non_split_alternative(N, K, 8))}\n"
    )
    assert main(["pins", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "FlashInfer any" in out and "meta: OK" in out


def test_check_flags_a_table_from_another_device(pinning, tmp_path, capsys):
    path = tmp_path / "pins.json"
    path.write_text(json.dumps({"meta": {"device": "sm_100", "flashinfer": ">=0.7"}}))
    assert main(["pins", "check", str(path)]) == 1
    assert "meta: pins in" in capsys.readouterr().out


def test_check_marks_entries_it_cannot_check_here(pinning, tmp_path, capsys):
    from fi_patches.compat import status_of

    if status_of("pinned_cute_dsl").enabled:
        pytest.skip("the cute-dsl feature is enabled here, so its entries are checked")
    path = write(
        tmp_path,
        f"[[cute_dsl]]\nn = {N}\nk = {K}\nmax_rows = 64\ntactic = [[128, 64], [1, 1], false, false, 1]\n",
    )
    assert main(["pins", "check", str(path)]) == 3
    assert "unchecked  pinned_cute_dsl is disabled here" in capsys.readouterr().out


def test_check_of_a_broken_file_exits_one(tmp_path, capsys):
    path = tmp_path / "pins.toml"
    path.write_text("[meta\n")
    assert main(["pins", "check", str(path)]) == 1
    assert "TOML" in capsys.readouterr().out


def test_check_of_a_lockfile_finds_runners_and_ops_and_leaves_tactics_to_the_tuner(
    tmp_path, capsys
):
    """A ``[[pin]]``'s runner and op are FlashInfer's or the entry is invalid; no runner of
    the factory-built class exists in this process, so ``pins check`` says unchecked (exit 3)
    with that reason, and doctor still counts the entry as applied."""
    require_release_supports("pinned_ops")
    from fi_patches.tools.check import pins_per_op

    body = (
        "[meta]\ndevice = '*'\nflashinfer = '>=0.7'\n"
        "[[pin]]\nop = 'bf16_gemm'\nrunner = 'CublasltBf16GemmRunner'\n"
        "shapes = [['rows', 4096], [4096, 7168]]\nmin_rows = 1\nmax_rows = 16\ntactic = 3\n"
    )
    path = tmp_path / "lock.toml"
    path.write_text(body)
    assert main(["pins", "check", str(path)]) == 3
    out = capsys.readouterr().out
    assert "unchecked  FlashInfer builds CublasltBf16GemmRunner inside a factory function" in out
    assert "whether tactic 3 is in CublasltBf16GemmRunner's own list" in out
    [ops] = pins_per_op(PinTable.from_file(path))
    assert (ops.op, ops.entries, ops.applied, ops.invalid, ops.unchecked) == (
        "bf16_gemm",
        1,
        1,
        0,
        1,
    )

    path.write_text(body.replace("CublasltBf16GemmRunner", "CublasltBf16GemmRunnerGone"))
    assert main(["pins", "check", str(path)]) == 1
    assert 'runner = "CublasltBf16GemmRunnerGone": is not a runner class' in capsys.readouterr().out
