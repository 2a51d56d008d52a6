"""The recording path where FlashInfer is not installed (a CPU laptop with fi_patches' wheel):
``pins record`` and ``pins diff`` of a cache FlashInfer's own tuner wrote, and ``tune
--timings``, each run in an interpreter that has neither FlashInfer nor torch. Each either
works or says in one line what needs FlashInfer; none raises."""

from __future__ import annotations

import json

import pytest
import torch

from fi_patches.pins import PinTable
from tests import lowlat
from tests.isolated_site import isolated_site, run_cli
from tests.mxfp8_inputs import Mxfp8Problem

N, K = lowlat.SHAPE
MISSING = "FlashInfer (flashinfer-python) is not installed here"


@pytest.fixture
def cache(both, tuner, tmp_path):
    """A v1 cache file FlashInfer's tuner wrote (profiling simulated on CPU)."""
    import flashinfer
    from flashinfer.autotuner import AutoTuner

    with flashinfer.autotune(True), pytest.raises(Exception, match="CUDA"):
        flashinfer.mm_mxfp8(
            *Mxfp8Problem(N, K, 8).mm_args(),
            out_dtype=torch.bfloat16,
            backend="cutedsl_low_latency",
        )
    path = tmp_path / "cache.json"
    AutoTuner.get().save_configs(str(path))
    return path


@pytest.fixture
def site(tmp_path):
    return isolated_site(tmp_path / "isolated", ["fi_patches", "packaging"])


def test_pins_record_writes_pin_entries_and_says_what_needs_flashinfer(cache, site, tmp_path):
    out = tmp_path / "pins.toml"
    done = run_cli(
        site,
        ["pins", "record", "--from", str(cache), "--device", "sm_103", "--out", str(out)],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"pins record: note: {MISSING}, so the MXFP8 runners' entries are written as [[pin]] "
        "entries; the [[low_latency]], [[cute_dsl]] and [[wide]] sections need its tuner's row "
        "buckets"
    ]
    table = PinTable.from_file(out)
    assert table.entries("pin") and not table.entries("low_latency")
    same = run_cli(site, ["pins", "diff", str(cache), str(out)], tmp_path)
    assert (same.returncode, same.stderr) == (0, ""), same.stderr
    assert same.stdout.splitlines()[-1].startswith("0 of ")


def test_pins_diff_against_sectioned_entries_says_what_needs_flashinfer(cache, site, tmp_path):
    table = tmp_path / "t.toml"
    table.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = "==0.7.4"\n\n'
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\n"
        "tactic = [128, 8, 1, 1]\n"
    )
    done = run_cli(site, ["pins", "diff", str(cache), str(table)], tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"pins diff: {table}: comparing its [[low_latency]] entries needs FlashInfer's tuner "
        f"buckets, and {MISSING}"
    ]


def test_tune_from_timings_says_what_needs_flashinfer(site, tmp_path):
    timings = tmp_path / "t.json"
    timings.write_text(
        json.dumps(
            {
                "format": "fi_patches.chain.timings/1",
                "device": "sm_103",
                "flashinfer": "0.7.4",
                "trials": [],
                "candidates": [],
            }
        )
    )
    out = tmp_path / "pins.toml"
    args = ["tune", "--chain", "deepseek_v3_tp4", "--timings", str(timings), "--out", str(out)]
    done = run_cli(site, [*args, "--no-progress"], tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"tune: needs FlashInfer, and {MISSING}: its tuner's row buckets and runners decide "
        "what a chain's pins may be, with --timings too"
    ]
    assert not out.exists() and not out.with_suffix(".provenance.json").exists()
