"""Recorded measurements: recording every sample of a run, and selecting from the file."""

from __future__ import annotations

import json

import pytest

from fi_patches.chain.select import tune
from fi_patches.chain.spec import ReplayError, Settings
from fi_patches.chain.timing import FORMAT, RecordingTimer, ReplayTimer, Trial
from tests.chain_helpers import CostTimer, additive, bucket, op, save, slots

# Nothing here depends on the installed FlashInfer release (see pyproject.toml).
pytestmark = pytest.mark.release_independent

TACTICS = ((128, 8, 1, 1), (128, 8, 1, 2), (256, 4, 1, 1))
COSTS = {
    "a": dict(zip(TACTICS, (10.0, 9.0, 9.5), strict=True)),
    "b": dict(zip(TACTICS, (5.0, 4.0, 6.0), strict=True)),
}
AFTER = {"a": {(128, 8, 1, 2): 2.0}}
SETTINGS = Settings(repeats=4, tie_tolerance=0.01)


def plan():
    return [(bucket(8), slots(op("a", TACTICS), op("b", TACTICS)))]


def test_replaying_a_recording_reproduces_the_run(tmp_path):
    recorder = RecordingTimer(CostTimer(additive(COSTS, AFTER), noise=0.02, seed=7))
    recorded = tune(plan(), recorder, SETTINGS)
    path = tmp_path / "timings.json"
    save(recorder, path, device="sm_103", flashinfer="0.7.4")
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["device"] == "sm_103"
    assert data["timer"] == "cost model"
    assert data["trials"][0]["tactics"] == [[128, 8, 1, 1], [128, 8, 1, 1]]
    assert all(len(t["samples_us"]) == SETTINGS.repeats for t in data["trials"])

    replay = ReplayTimer(path)
    assert (replay.device, replay.flashinfer) == ("sm_103", "0.7.4")
    replayed = tune(plan(), replay, SETTINGS)
    assert [r.to_json() for r in replayed] == [r.to_json() for r in recorded]
    assert recorded[0].chosen == {"a": (256, 4, 1, 1), "b": (128, 8, 1, 2)}


def test_a_trial_not_recorded_is_named(tmp_path):
    recorder = RecordingTimer(CostTimer(additive(COSTS)))
    tune([(bucket(8), slots(op("a", TACTICS[:2])))], recorder, SETTINGS)
    path = tmp_path / "t.json"
    save(recorder, path, device="sm_103", flashinfer="0.7.4")
    data = json.loads(path.read_text())
    del data["candidates"]  # as recorded before candidates were: the op lists its own
    path.write_text(json.dumps(data))
    with pytest.raises(ReplayError, match=r"has no measurement of a \[256, 4, 1, 1\] at 8 rows"):
        tune([(bucket(8), slots(op("a", TACTICS)))], ReplayTimer(path), SETTINGS)


class Unlisted:
    """A runner that cannot list its tactics here (as the cute-dsl runner off the GPU)."""

    def get_valid_tactics(self, inputs, profile):
        raise AssertionError("Torch not compiled with CUDA enabled")


def test_a_replay_offers_the_recorded_candidates_and_never_asks_the_runner(tmp_path):
    from fi_patches.chain.ops import RunnerOp

    recorder = RecordingTimer(CostTimer(additive(COSTS, AFTER), noise=0.02, seed=7))
    recorded = tune(plan(), recorder, SETTINGS)
    path = tmp_path / "timings.json"
    save(recorder, path, device="sm_103", flashinfer="0.7.4")
    assert json.loads(path.read_text())["candidates"] == [
        {"op": name, "section": None, "rows": 8, "tactics": [list(t) for t in TACTICS]}
        for name in ("a", "b")
    ]
    unlisted = [(bucket(8), slots(*(RunnerOp(n, Unlisted(), lambda rows: None) for n in "ab")))]
    replayed = tune(unlisted, ReplayTimer(path), SETTINGS)
    assert [r.to_json() for r in replayed] == [r.to_json() for r in recorded]

    data = json.loads(path.read_text())
    data["candidates"] = data["candidates"][:1]
    path.write_text(json.dumps(data))
    with pytest.raises(ReplayError, match=r"has no candidates of .* \(op 'b'\) at 8 rows; record"):
        tune(unlisted, ReplayTimer(path), SETTINGS)
    del data["candidates"]
    path.write_text(json.dumps(data))
    with pytest.raises(
        ReplayError,
        match=r"records no candidates \(the tactics each op offers; tune --save-timings records "
        r"them\), and .* \(op 'a'\) cannot list its own at 8 rows here \(AssertionError: Torch "
        r"not compiled with CUDA enabled\); record the timings again with tune --save-timings$",
    ):
        tune(unlisted, ReplayTimer(path), SETTINGS)


def write(tmp_path, **data):
    path = tmp_path / "t.json"
    base = {"format": FORMAT, "device": "sm_103", "flashinfer": "0.7.4", "trials": []}
    path.write_text(json.dumps({**base, **data}))
    return path


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"format": "v0"}, 'format = "v0": must be "fi_patches.chain.timings/1"'),
        ({"device": ""}, 'device = "": must be a non-empty string'),
        ({"trials": {}}, "trials = {}: must be a list"),
        (
            {"trials": [{"rows": 0, "ops": ["a"], "tactics": [1], "samples_us": [1]}]},
            "trials #1: rows = 0: must be a positive integer",
        ),
        (
            {"trials": [{"rows": 1, "ops": [], "tactics": [], "samples_us": [1]}]},
            "trials #1: ops = []: must be a non-empty list of op names",
        ),
        (
            {"trials": [{"rows": 1, "ops": ["a"], "tactics": [], "samples_us": [1]}]},
            "trials #1: tactics = []: must list one tactic per op",
        ),
        (
            {"trials": [{"rows": 1, "ops": ["a"], "tactics": [1], "samples_us": [-1]}]},
            "trials #1: samples_us = [-1]: must be a non-empty list of non-negative numbers",
        ),
        ({"candidates": {}}, "candidates = {}: must be a list"),
        ({"candidates": [[]]}, "candidates #1: must be a table"),
        (
            {"candidates": [{"op": "", "section": None, "rows": 1, "tactics": []}]},
            "candidates #1: op = '': must be an op name",
        ),
        (
            {"candidates": [{"op": "a", "section": 3, "rows": 1, "tactics": []}]},
            "candidates #1: section = 3: must be a section name or null",
        ),
        (
            {"candidates": [{"op": "a", "section": "wide", "rows": True, "tactics": []}]},
            "candidates #1: rows = True: must be a positive integer",
        ),
        (
            {"candidates": [{"op": "a", "section": "wide", "rows": 16, "tactics": None}]},
            "candidates #1: tactics = None: must be a list of tactics",
        ),
    ],
)
def test_bad_files_name_the_field_and_value(tmp_path, data, message):
    path = write(tmp_path, **data)
    with pytest.raises(ReplayError) as info:
        ReplayTimer(path)
    assert str(info.value) == f"{path}: {message}"


def test_unreadable_and_non_json_files(tmp_path):
    with pytest.raises(ReplayError, match="cannot be read"):
        ReplayTimer(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ReplayError, match=r"bad.json: JSON: Expecting property name"):
        ReplayTimer(bad)


def test_entries_are_handed_out_in_order_and_start_over(tmp_path):
    entry = {"rows": 2, "ops": ["a"], "tactics": [[1, 2]]}
    path = write(tmp_path, trials=[{**entry, "samples_us": [1, 2]}, {**entry, "samples_us": [5]}])
    timer = ReplayTimer(path)
    trial = Trial(2, ("a",), ((1, 2),))
    first = timer.prepare(trial)
    assert [first.sample() for _ in range(3)] == [1.0, 2.0, 1.0]
    assert [timer.prepare(trial).sample() for _ in range(2)] == [5.0, 1.0]
