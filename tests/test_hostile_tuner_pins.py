"""Hostile input for the engine's own files: generated ``[[pin]]`` lockfiles load into exactly
their entries through TOML and JSON or are refused with one ``PinTableError`` naming the entry
and field; damaged tuner caches read as entries or one ``TunerCacheError``; merging caches that
disagree does not depend on their order; a lockfile of thousands of entries loads and indexes.
Every example is bounded in CPU time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fi_patches.pinning.index import merge
from fi_patches.pins import PinTable, PinTableError
from fi_patches.pins.keys import TunerKey, as_tactic, parse_file_key, runner_overlaps
from fi_patches.tools.merge import merge as merge_caches
from fi_patches.tools.record import Tuned, TunerCacheError, dumps, from_v1_file
from tests.conftest import costly_examples

pytestmark = pytest.mark.release_independent  # files and the index alone: no FlashInfer call

CPU_BOUND_S = 2.0

names = st.text(st.sampled_from("abcdefgh_:0123456789"), min_size=1, max_size=24).filter(
    lambda s: s == s.strip()
)
dims = st.one_of(st.integers(-1, 1 << 20), st.sampled_from(["rows", "*"]))
scalars = st.one_of(st.integers(-(1 << 40), 1 << 40), st.booleans(), names)
tactics = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=10)


@st.composite
def pin_entries(draw: Any) -> dict[str, Any]:
    shapes = draw(st.lists(st.lists(dims, max_size=4), min_size=1, max_size=6))
    entry: dict[str, Any] = {"op": draw(names), "runner": draw(names), "shapes": shapes}
    if any("rows" in shape for shape in shapes):
        lo = draw(st.integers(1, 1024))
        entry["min_rows"], entry["max_rows"] = lo, draw(st.integers(lo, 4096))
    if draw(st.booleans()):
        entry["extras"] = draw(st.text(max_size=40))
    entry["tactic"] = draw(tactics)
    return entry


@st.composite
def lockfiles(draw: Any) -> dict[str, Any]:
    entries = draw(st.lists(pin_entries(), max_size=8))
    unique, seen = [], set()
    for entry in entries:  # one entry per key: overlapping keys are refused (tested apart)
        key = (entry["op"], entry["runner"], json.dumps(entry["shapes"]), entry.get("extras"))
        if key not in seen:
            seen.add(key)
            unique.append(entry)
    return {"meta": {"device": "*", "flashinfer": ""}, "pin": unique}


def _bounded(fn: Any) -> Any:
    start = time.process_time()
    try:
        return fn()
    finally:
        assert time.process_time() - start < CPU_BOUND_S


@costly_examples()
@given(lockfiles(), st.sampled_from(["toml", "json"]))
def test_generated_lockfiles_load_exactly_their_entries(tmp_path_factory, data, form):
    folder = tmp_path_factory.mktemp("lock", numbered=True)
    path = folder / f"lock.{form}"
    path.write_text(dumps(data) if form == "toml" else json.dumps(data), encoding="utf-8")
    table = _bounded(lambda: PinTable.from_file(path))
    loaded = [e.to_mapping() for e in table.entries("pin")]
    assert len(loaded) == len(data["pin"])
    for given_entry, entry in zip(data["pin"], loaded, strict=True):
        assert entry["op"] == given_entry["op"] and entry["runner"] == given_entry["runner"]
        assert entry["shapes"] == given_entry["shapes"]
        assert as_tactic(entry["tactic"]) == as_tactic(given_entry["tactic"])
        assert entry.get("extras") == given_entry.get("extras")
    again = PinTable.from_mapping(table.to_mapping())  # and back, the same
    assert [e.to_mapping() for e in again.entries("pin")] == loaded


hostile = st.one_of(
    st.none(),
    st.floats(allow_nan=True),
    st.integers(-(1 << 70), 1 << 70),
    st.text(max_size=300),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
    st.lists(st.none(), max_size=3),
    st.recursive(st.integers(), lambda inner: st.lists(inner, max_size=2), max_leaves=60),
)


@costly_examples()
@given(lockfiles().filter(lambda d: d["pin"]), st.data())
def test_a_damaged_entry_is_refused_naming_it_or_loads_as_given(data, draw):
    position = draw.draw(st.integers(0, len(data["pin"]) - 1))
    field = draw.draw(st.sampled_from(["op", "runner", "shapes", "min_rows", "extras", "tactic"]))
    data["pin"][position] = {**data["pin"][position], field: draw.draw(hostile)}
    try:
        table = _bounded(lambda: PinTable.from_mapping(data, source="lock.toml"))
    except PinTableError as exc:
        assert exc.problems and all(p.source == "lock.toml" for p in exc.problems)
        assert any(p.where.startswith("[[pin]] #") for p in exc.problems), exc.one_line()
        return
    assert len(table.entries("pin")) == len(data["pin"])


def test_overlapping_keys_are_refused_with_both_entries_named():
    entry = {"op": "o", "runner": "R", "shapes": [["rows", 8]], "max_rows": 16, "tactic": 1}
    with pytest.raises(PinTableError) as refused:
        PinTable.from_mapping(
            {
                "meta": {"device": "*", "flashinfer": ""},
                "pin": [entry, {**entry, "min_rows": 16, "max_rows": 32, "tactic": 2}],
            },
            source="lock.toml",
        )
    assert "[[pin]] #2" in str(refused.value) and "entry #1" in str(refused.value)


def test_two_runners_a_table_pins_for_one_bucket_are_found_among_thousands_in_bounded_time():
    """8,000 entries of one op and shapes, three runners taking turns (each entry with extras of
    its own): ``pins diff`` finds the runners a table pins for one bucket in one sweep, not pair
    by pair."""
    entries = [
        {
            "op": "o",
            "runner": f"Runner{i % 3}",
            "shapes": [["rows", 64], [64, 128]],
            "min_rows": 2 * i + 1,
            "max_rows": 2 * i + 2,
            "extras": f"({i},)",
            "tactic": i,
        }
        for i in range(8000)
    ]
    meta = {"device": "*", "flashinfer": ""}
    table = PinTable.from_mapping({"meta": meta, "pin": entries})
    assert _bounded(lambda: runner_overlaps(table.entries("pin"))) == []
    clash = {**entries[10], "runner": "Runner9", "min_rows": 14000, "max_rows": 14001}
    both = PinTable.from_mapping({"meta": meta, "pin": [*entries, clash]}).entries("pin")
    pairs = _bounded(lambda: runner_overlaps(both))
    assert sorted((a.index, b.index) for a, b in pairs) == [(7001, 8001), (8001, 7000)]


@given(st.text(max_size=400))
def test_any_text_is_a_file_key_or_none(text):
    found = _bounded(lambda: parse_file_key(text))
    assert found is None or isinstance(found, TunerKey)


cache_values = st.one_of(
    st.lists(st.one_of(names, tactics), max_size=4),
    hostile,
    st.builds(lambda t: ["R", t], tactics),
)
cache_keys = st.one_of(
    st.text(max_size=80),
    st.builds(
        lambda op, shape, extras: str((op, "R", shape, extras)),
        names,
        st.lists(st.lists(st.integers(-1, 512), max_size=3).map(tuple), max_size=3).map(tuple),
        st.text(max_size=10),
    ),
)


@costly_examples()
@given(st.dictionaries(cache_keys, cache_values, max_size=12), st.booleans())
def test_a_damaged_cache_reads_as_entries_or_one_error(tmp_path_factory, data, truncate):
    path = tmp_path_factory.mktemp("cache", numbered=True) / "cache.json"
    text = json.dumps(data)
    path.write_text(text[: len(text) // 2] if truncate else text, encoding="utf-8")
    try:
        entries, _ = _bounded(lambda: from_v1_file(path))
    except TunerCacheError as exc:
        assert str(path) in str(exc)
        return
    assert all(isinstance(e, Tuned) and e.key.runner == "R" for e in entries)


EXTRAS = {"R": "()", "S": "(torch.float32,)"}
"""Each runner's extras: FlashInfer files a winner under the winning runner's own key."""

buckets = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([1, 2, 4, 8]))
choices = st.tuples(st.sampled_from(sorted(EXTRAS)), st.integers(0, 3))


def _tuned(bucket: tuple[str, int], choice: tuple[str, int]) -> Tuned:
    (op, rows), (runner, tactic) = bucket, choice
    return Tuned(TunerKey(op, runner, ((rows, 64), (64, 32)), EXTRAS[runner]), tactic)


@given(
    st.lists(
        st.dictionaries(buckets, st.lists(choices, min_size=1, max_size=2), max_size=8),
        min_size=2,
        max_size=5,
    )
)
def test_merging_caches_that_disagree_does_not_depend_on_their_order(runs):
    """Caches whose winners differ in runner or tactic, some holding a winner of each runner for
    one bucket (the op called per backend): one winner per bucket and lane (a runner tuned apart
    has its own), every bucket with two choices reported with the caches behind each, whatever
    their order."""
    sources = [
        (f"rank{i}", [_tuned(b, c) for b, won in run.items() for c in won])
        for i, run in enumerate(runs)
    ]
    forward, votes, count = merge_caches(sources, lambda key: None)
    backward, votes_back, count_back = merge_caches(list(reversed(sources)), lambda key: None)
    assert [(e.key, e.tactic) for e in forward] == [(e.key, e.tactic) for e in backward]
    apart = {
        (op, runner)
        for run in runs
        for (op, _), won in run.items()
        if len({r for r, _ in won}) > 1
        for runner, _ in won
    }
    made: dict[tuple[str, int, str], dict[tuple[str, int], set[str]]] = {}
    for i, run in enumerate(runs):
        for (op, rows), won in run.items():
            for runner, tactic in won:
                lane = runner if (op, runner) in apart else ""
                made.setdefault((op, rows, lane), {}).setdefault((runner, tactic), set()).add(
                    f"rank{i}"
                )

    def lane_of(op: str, rows: int, runner: str) -> tuple[str, int, str]:
        return op, rows, runner if (op, runner) in apart else ""

    assert count == count_back == len(made)
    decided = sorted(lane_of(e.key.op, e.key.profile[0][0], e.key.runner) for e in forward)
    assert decided == sorted(made)  # one winner each
    for e in forward:
        chosen = made[lane_of(e.key.op, e.key.profile[0][0], e.key.runner)]
        top = max(len(labels) for labels in chosen.values())
        assert len(chosen.get((e.key.runner, e.tactic), ())) == top  # a majority choice
        assert e.key.extras == EXTRAS[e.key.runner]
    disagreed = {d for d, chosen in made.items() if len(chosen) > 1}
    lanes = [lane_of(v.key.op, v.key.profile[0][0], v.key.runner) for v in votes]
    assert sorted(lanes) == sorted(disagreed)
    for vote, lane in zip(votes, lanes, strict=True):
        assert vote.decision == (lane[0], vote.key.profile, lane[2])
        said = {(c.runner, c.tactic): set(labels) for c, labels in vote.choices}
        assert said == made[lane]
        assert (vote.chosen.runner, vote.chosen.tactic) == (vote.key.runner, vote.tuned.tactic)

    def normal(found: list[Any]) -> list[Any]:
        return [(v.key, v.chosen, v.rule, {c: set(ls) for c, ls in v.choices}) for v in found]

    assert normal(votes) == normal(votes_back)


def test_a_lockfile_of_thousands_of_entries_loads_and_indexes(tmp_path: Path):
    from tests.toy_op import decoy_pins

    entries = decoy_pins(5000, ops=13, runner_names=29)
    path = tmp_path / "lock.toml"
    path.write_text(dumps({"meta": {"device": "*", "flashinfer": ""}, "pin": entries}))
    table = PinTable.from_file(path)
    assert len(table.entries("pin")) == 5000
    index = merge(((table, "narrow"),))
    found = 0
    for i in (0, 1234, 4999):
        pins = index.classes[f"Runner{i % 29}"]
        from fi_patches.pinning.index import key_hits

        hits = key_hits(pins.groups, f"op{i % 13}", ((8, 64 + i), (64 + i, 128), (5,)), None)
        assert len(hits) == 1 and hits[0].tactic == (i, (i % 3, True))
        found += 1
    assert found == 3
    assert merge(((table, "narrow"),)) is index  # entering another block reuses the index
