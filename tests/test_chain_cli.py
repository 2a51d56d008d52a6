"""``python -m fi_patches tune`` on CPU: selection from recorded measurements over FlashInfer's
real runners (simulated sm_103), the pin table it writes (which ``pins check`` passes), the
provenance sidecar, ``--isolated``, the progress display and its errors."""

from __future__ import annotations

import importlib.util
import io
import json

import pytest

from fi_patches.chain.plan import build_plan
from fi_patches.chain.select import tune
from fi_patches.chain.spec import ChainSpec
from fi_patches.chain.timing import RecordingTimer
from fi_patches.cli import main
from fi_patches.cli.console import PlainCounter, progress
from fi_patches.pins.table import PinTable
from tests.chain_helpers import CHAIN, CostTimer, cpu_only, save
from tests.conftest import flashinfer_or_skip


def _installed() -> str:
    from fi_patches.compat.features import installed_flashinfer

    return installed_flashinfer().version_text or "0"


HERE = _installed()
"""The installed FlashInfer release: recordings made here name it, as `tune` records them."""


def _flat(tactic):
    if isinstance(tactic, tuple):
        return [x for part in tactic for x in _flat(part)]
    return [int(tactic)]


def model(trial):
    """Split-K tactics (last element > 1) save 1 us alone and cost 3 us when another op
    follows; other tactics differ by up to 0.06 us (ties at a 1% tolerance)."""
    total = 0.0
    for position, tactic in enumerate(trial.tactics):
        split = _flat(tactic)[-1] > 1
        total += 10.0 - (1.0 if split else 0.0) + 0.01 * (sum(_flat(tactic)) % 7)
        if split and position + 1 < len(trial.tactics):
            total += 3.0
    return total


@pytest.fixture
def chain(tmp_path):
    path = tmp_path / "chain.toml"
    path.write_text(CHAIN)
    return path


def record(chain, path, isolated=False):
    spec = ChainSpec.from_file(chain)
    plan = build_plan(spec, sm_version=103)
    recorder = RecordingTimer(CostTimer(model, noise=0.001, seed=1))
    results = tune(plan, recorder, spec.settings, isolated=isolated)
    save(recorder, path, device="sm_103", flashinfer=HERE)
    return results


def run_tune(chain, out, timings, *extra):
    return main(
        [
            "tune",
            "--chain",
            str(chain),
            "--out",
            str(out),
            "--timings",
            str(timings),
            "--no-progress",
            *extra,
        ]
    )


def test_tune_selects_from_recorded_measurements_and_pins_check_passes(
    both, chain, tmp_path, capsys
):
    timings = tmp_path / "timings.json"
    results = record(chain, timings)
    out = tmp_path / "pins.toml"
    assert run_tune(chain, out, timings) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out} (" in printed and "pins.provenance.json" in printed
    table = PinTable.from_file(out)
    assert table.meta.device == "sm_103" and str(table.meta.flashinfer) == f"=={HERE}"
    assert "tuned in the chain test-chain" in table.meta.note
    assert "provenance in pins.provenance.json" in table.meta.note
    assert table.meta.source.startswith("python -m fi_patches tune --chain")
    chosen = {r.bucket.label: r.chosen for r in results}
    # the replayed selection is the recorded one, entry by entry
    assert table.low_latency_tactic(6144, 1536, 8) == chosen["5..8"]["low_latency 6144x1536"]
    assert (32, *table.wide_pin(7168, 4096, 32).tactic) == chosen["17..32"]["wide 7168x4096"]
    assert table.cute_dsl_tactic(2112, 7168, 100) == chosen["65..128"]["cute_dsl 2112x7168"]
    # in the chain, only the last op keeps a split-K tactic (the first 6 cute-dsl tactics
    # offered have none)
    for label, picks in chosen.items():
        splits = [_flat(picks[c])[-1] > 1 for c in picks]
        assert splits == [False, False, label != "65..128"], label
    assert [len(table.entries(s)) for s in ("low_latency", "wide", "cute_dsl")] == [3, 3, 3]

    assert main(["pins", "check", str(out)]) == 0
    assert "invalid" not in capsys.readouterr().out


def test_the_provenance_sidecar_records_chain_buckets_candidates_and_ties(both, chain, tmp_path):
    timings = tmp_path / "timings.json"
    record(chain, timings)
    assert run_tune(chain, tmp_path / "pins.json", timings) == 0
    assert json.loads((tmp_path / "pins.json").read_text())["meta"]["device"] == "sm_103"
    data = json.loads((tmp_path / "pins.provenance.json").read_text())
    assert data["format"] == "fi_patches.chain.provenance/1" and data["mode"] == "chain"
    assert [op["name"] for op in data["chain"]["ops"]] == ["fused_wqa_wkv", "wq_b", "wo_b"]
    assert data["timer"].startswith(f"recorded measurements from {timings}")
    assert data["settings"]["tie_tolerance"] == 0.01 and data["device"] == "sm_103"
    assert [(b["min_rows"], b["max_rows"], b["rows"]) for b in data["buckets"]] == [
        (5, 8, 8),
        (17, 32, 32),
        (65, 128, 128),
    ]
    bucket = data["buckets"][0]
    assert bucket["converged"] and bucket["chain_median_us"] > 0
    step = bucket["steps"][0]
    assert len(step["candidates"]) == 6
    assert {"tactic", "median_us", "min_us", "max_us", "spread", "samples"} <= set(
        step["candidates"][0]
    )
    ties = [s for b in data["buckets"] for s in b["steps"] if s["tie"]]
    assert ties and all(s["rule"] in ("current pin", "enumerator order") for s in ties)
    assert all(len(s["tied"]) > 1 for s in ties)


def test_isolated_picks_split_k_where_the_chain_does_not(both, chain, tmp_path, capsys):
    timings = tmp_path / "alone.json"
    record(chain, timings, isolated=True)
    out = tmp_path / "alone.toml"
    assert run_tune(chain, out, timings, "--isolated") == 0
    assert "alone us" in capsys.readouterr().out
    table = PinTable.from_file(out)
    assert "tuned each op alone" in table.meta.note
    assert [e.tactic[-1] > 1 for e in table.entries("low_latency")] == [True] * 3
    assert main(["pins", "check", str(out)]) == 0


def test_current_pins_win_ties(both, chain, tmp_path):
    timings = tmp_path / "timings.json"
    [low, *_] = record(chain, timings)
    step = low.final_step("low_latency 6144x1536")
    assert step.tie
    other = step.tied[-1]
    assert other != step.chosen
    pins = tmp_path / "current.toml"
    pins.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = "==0.7.4"\n\n[[low_latency]]\n'
        f"n = 6144\nk = 1536\nmin_rows = 5\nmax_rows = 8\ntactic = {list(other)}\n"
    )
    spec = ChainSpec.from_file(chain)
    current = PinTable.from_file(pins)
    plan = build_plan(spec, sm_version=103, current=current)
    recorder = RecordingTimer(CostTimer(model, noise=0.001, seed=1))
    results = tune(plan, recorder, spec.settings)
    assert results[0].chosen["low_latency 6144x1536"] == other
    assert results[0].final_step("low_latency 6144x1536").rule == "current pin"
    save(recorder, timings, device="sm_103", flashinfer=HERE)
    out = tmp_path / "pins.toml"
    assert run_tune(chain, out, timings, "--pins", str(pins)) == 0
    assert PinTable.from_file(out).low_latency_tactic(6144, 1536, 8) == other


def test_save_timings_re_records_what_was_replayed(both, chain, tmp_path):
    timings = tmp_path / "timings.json"
    record(chain, timings)
    again = tmp_path / "again.json"
    assert run_tune(chain, tmp_path / "a.toml", timings, "--save-timings", str(again)) == 0
    assert run_tune(chain, tmp_path / "b.toml", again) == 0
    a, b = (PinTable.from_file(tmp_path / n).to_mapping() for n in ("a.toml", "b.toml"))
    assert a["low_latency"] == b["low_latency"] and a["wide"] == b["wide"]


@cpu_only
@pytest.mark.parametrize("target", ["sm_103", None])
def test_timing_here_needs_a_blackwell_gpu(sm103, chain, tmp_path, capsys, monkeypatch, target):
    # FI_PATCHES_DEVICE names the pins' target, never the device that times them
    flashinfer_or_skip()  # without it, tune stops earlier: it needs FlashInfer's tuner
    if target is None:
        monkeypatch.delenv("FI_PATCHES_DEVICE")
    assert main(["tune", "--chain", str(chain), "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert "needs an sm_100/sm_103 GPU, whatever FI_PATCHES_DEVICE says; here torch sees no " in err
    assert "--timings FILE to select from recorded measurements" in err
    assert not (tmp_path / "p.toml").exists()


@cpu_only
def test_an_old_timings_file_whose_runner_cannot_list_here_says_what_is_missing(
    pinning, chain, tmp_path, capsys
):
    timings = tmp_path / "timings.json"
    timings.write_text(
        json.dumps(
            {
                "format": "fi_patches.chain.timings/1",
                "device": "sm_103",
                "flashinfer": "0.7.4",
                "trials": [],
            }
        )
    )
    assert run_tune(chain, tmp_path / "p.toml", timings) == 1  # no simulated SM count
    assert capsys.readouterr().err == (
        f"tune: {timings} records no candidates (the tactics each op offers; tune --save-timings "
        "records them), and cute_dsl runner for 2112x7168 (op 'fused_wqa_wkv') cannot list its "
        "own at 128 rows here (AssertionError: Torch not compiled with CUDA enabled); record "
        "the timings again with tune --save-timings\n"
    )


OFF_GPU = """
import sys
from fi_patches.cli import main
sys.exit(main(["tune", "--chain", "deepseek_v3_tp4", "--out", sys.argv[1], "--timings",
               sys.argv[2], "--no-progress"]))
"""


def test_the_shipped_chain_replays_off_the_gpu_from_recorded_timings(both, tmp_path):
    """Recorded where the runners list their tactics (the simulated sm_103), replayed in a
    plain CPU process: no device, no FI_PATCHES_DEVICE, no simulation."""
    import os
    import subprocess
    import sys

    from fi_patches.chain.spec import chain_path

    shipped = chain_path("deepseek_v3_tp4")
    timings = tmp_path / "t.json"
    recorded = record(shipped, timings)
    assert {c["section"] for c in json.loads(timings.read_text())["candidates"]} == {
        "low_latency",
        "wide",
        "cute_dsl",
    }
    out = tmp_path / "pins.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    done = subprocess.run(
        [sys.executable, "-c", OFF_GPU, str(out), str(timings)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    # a note on the table (chosen on sm_103, read on no device) names the file, not the command
    assert "python -m fi_patches tune" not in done.stderr, done.stderr
    if "were chosen on" in done.stderr:
        assert f"pins in {out} were chosen on sm_103" in done.stderr
    sidecar = json.loads(out.with_suffix(".provenance.json").read_text())
    assert sidecar["buckets"] == [r.to_json() for r in recorded]  # the same run, replayed


def test_bad_inputs_exit_1_naming_the_file_and_field(both, chain, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(CHAIN.replace("repeats = 3", "repeats = -1"))
    assert main(["tune", "--chain", str(bad), "--out", str(tmp_path / "p.toml")]) == 1
    assert f"{bad}: [chain]: repeats = -1: must be between 1 and 1000" in capsys.readouterr().err
    split = tmp_path / "split.toml"
    split.write_text(CHAIN.replace("min_rows = 65", "min_rows = 100"))
    timings = tmp_path / "t.json"
    timings.write_text(
        json.dumps(
            {
                "format": "fi_patches.chain.timings/1",
                "device": "sm_103",
                "flashinfer": "0.7.4",
                "trials": [],
            }
        )
    )
    assert run_tune(split, tmp_path / "p.toml", timings) == 1
    assert "rows 100..128 split FlashInfer's tuner bucket of rows 65..128" in (
        capsys.readouterr().err
    )
    assert run_tune(chain, tmp_path / "p.toml", timings) == 1
    assert "has no measurement of fused_wqa_wkv [128, 8, 1, 1]" in capsys.readouterr().err
    assert run_tune(chain, tmp_path / "p.toml", tmp_path / "none.json") == 1
    assert "cannot be read" in capsys.readouterr().err
    # a tuner cache given as timings: say what it is and which command reads it
    cache = tmp_path / "rank0.json"
    cache.write_text(json.dumps({"_metadata": {"flashinfer_version": HERE}}))
    assert run_tune(chain, tmp_path / "p.toml", cache) == 1
    err = capsys.readouterr().err
    assert err == (
        f"tune: {cache}: is a FlashInfer tuner cache, not a timings file (which tune "
        "--save-timings writes); pins record --from reads tuner caches\n"
    )
    table = tmp_path / "pins.json"
    table.write_text(json.dumps({"meta": {"device": "sm_103", "flashinfer": HERE}}))
    assert run_tune(chain, tmp_path / "p.toml", table) == 1
    assert "is a pin table, not a timings file" in capsys.readouterr().err
    assert not (tmp_path / "p.toml").exists()


def test_progress_on_stderr(both, chain, tmp_path, capsys):
    timings = tmp_path / "timings.json"
    record(chain, timings)
    assert (
        main(
            [
                "tune",
                "--chain",
                str(chain),
                "--out",
                str(tmp_path / "p.toml"),
                "--timings",
                str(timings),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    if importlib.util.find_spec("tqdm") is not None:
        assert "tune: 100%" in err and "sample" in err
    else:
        assert "samples (rows 65..128, cute_dsl 7168x4096)" in err


def test_the_plain_counter_without_tqdm():
    stream = io.StringIO()
    counter = progress(stream, "tune", use_tqdm=False)
    assert isinstance(counter, PlainCounter)
    for _ in range(5):
        counter(1, 5, "rows 8, low_latency 2112x7168")
    counter.close()
    text = stream.getvalue()
    assert text.startswith("\rtune: 1/5 samples (rows 8, low_latency 2112x7168)")
    assert "\rtune: 5/5 samples" in text and text.endswith("\n")


def test_a_timings_file_of_an_unknown_arch_is_refused_with_the_known_ones(
    both, chain, tmp_path, capsys
):
    timings = tmp_path / "timings.json"
    record(chain, timings)
    data = json.loads(timings.read_text())
    data["device"] = "sm_999"
    timings.write_text(json.dumps(data))
    out = tmp_path / "p.toml"
    assert run_tune(chain, out, timings) != 0
    err = capsys.readouterr().err
    assert f"{timings}: device = 'sm_999' names no arch of any CUDA or FlashInfer release" in err
    assert "known: " in err and "sm_103" in err
    assert not out.exists()
