"""The engine for every op, against FlashInfer's real tuner (CPU, profiling simulated): a
lockfile recorded from FlashInfer's own cache pins every key of it on later starts, whatever the
timings say, with unpinned keys stock; under ``autotune()``, ``autotune_v2()`` and both; in
narrow and preseed mode; for runners made before or inside the block."""

from __future__ import annotations

import inspect
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

import fi_patches
from fi_patches.pins import PinTable, PinTableError
from fi_patches.tools.record import read_cache, to_table
from tests import toy_op


def _record(path: Path, note: str = "") -> PinTable:
    from fi_patches.pinning.validate import mxfp8_bucket_of

    entries, meta = read_cache(path)
    return to_table(
        entries,
        device="sm_103",
        flashinfer_version=str(meta.get("flashinfer_version", "0.7.4")),
        source=str(path),
        bucket_of=mxfp8_bucket_of(),
        note=note,
    )


def _tune_once(flashinfer: Any, monkeypatch: pytest.MonkeyPatch, seed: int, path: Path) -> dict:
    toy_op.start(monkeypatch, seed)
    with flashinfer.autotune(True, cache=str(path)):
        toy_op.warm_up()
    return toy_op.chosen()


@pytest.fixture
def recorded(engine: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[PinTable, dict]:
    first = _tune_once(engine, monkeypatch, 1, tmp_path / "run1.json")
    return _record(tmp_path / "run1.json"), first


def test_fresh_tunes_disagree_and_the_lockfile_holds_every_key(
    recorded, engine, monkeypatch, tmp_path
):
    table, first = recorded
    second = _tune_once(engine, monkeypatch, 2, tmp_path / "run2.json")
    assert first.keys() == second.keys() and len(first) == 2 * 7
    assert any(first[k] != second[k] for k in first)  # the divergence the lockfile removes
    pins = table.entries("pin")
    assert pins and {p.op for p in pins} == {toy_op.OP}
    assert all(p.shapes.has_rows for p in pins)  # buckets merged into row ranges
    covered = 0
    for (n, bucket), (runner, tactic) in first.items():
        pin = next(
            p for p in pins if p.shapes.dims[1][1] == n and p.min_rows <= bucket <= p.max_rows
        )
        assert (pin.runner, pin.tactic) == (runner, fi_patches_tactic(tactic))
        covered += 1
    assert covered == len(first)


def fi_patches_tactic(tactic: Any) -> Any:
    from fi_patches.pins.keys import as_tactic

    return as_tactic(tactic)


def _pinned_start(
    flashinfer: Any, monkeypatch: pytest.MonkeyPatch, table: PinTable, seed: int, **kwargs: Any
) -> toy_op.Profiling:
    profiling = toy_op.start(monkeypatch, seed)
    with fi_patches.pinned_tactics(table, **kwargs):
        with flashinfer.autotune(True):
            toy_op.warm_up()
    return profiling


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_later_starts_end_with_every_pin_profiling_one_tactic_each(
    recorded, engine, monkeypatch, seed
):
    table, first = recorded
    profiling = _pinned_start(engine, monkeypatch, table, seed)
    assert toy_op.chosen() == first
    per_key: dict[tuple[int, int], int] = {}
    for _runner, rows, _tactic in profiling.timed:
        per_key[rows] = per_key.get(rows, 0) + 1
    # 2 weights x 7 buckets, one tactic each (the other runner offers nothing for the key)
    assert len(profiling.timed) == len(first)
    toy_op.RAN.calls.clear()
    for n in toy_op.WEIGHTS:
        for rows in (3, 20):
            toy_op.toy_mm(*toy_op.operands(rows, n))
    bucket = {3: 4, 20: 32}
    ran = [(r, t) for r, _, t in toy_op.RAN.calls]
    expected = [first[(n, bucket[rows])] for n in toy_op.WEIGHTS for rows in (3, 20)]
    assert ran == [(r, fi_patches_tactic(t)) for r, t in expected]


def test_an_unpinned_weight_is_tuned_over_the_stock_lists(recorded, engine, monkeypatch):
    table, _ = recorded
    profiling = toy_op.start(monkeypatch, 5)
    with fi_patches.pinned_tactics(table), engine.autotune(True):
        toy_op.toy_mm(*toy_op.operands(8, 80))
    tile, split = toy_op.runner_classes()[0], toy_op.runner_classes()[1]
    timed = {(r, t) for r, _, t in profiling.timed}
    assert {t for r, t in timed if r == "ToySplitRunner"} == {1, 2, 4}
    assert len({t for r, t in timed if r == "ToyTileRunner"}) == 6
    del tile, split


def test_preseed_profiles_nothing_for_pinned_keys_and_writes_nothing(recorded, engine, monkeypatch):
    table, first = recorded
    profiling = toy_op.start(monkeypatch, 6)
    with fi_patches.pinned_tactics(table, mode="preseed"):
        with engine.autotune(True):
            toy_op.warm_up()
        assert profiling.timed == []
        toy_op.RAN.calls.clear()
        toy_op.toy_mm(*toy_op.operands(3, toy_op.WEIGHTS[0]))
        assert [(r, t) for r, _, t in toy_op.RAN.calls] == [
            (first[(toy_op.WEIGHTS[0], 4)][0], fi_patches_tactic(first[(toy_op.WEIGHTS[0], 4)][1]))
        ]
    assert toy_op.chosen() == {}  # nothing was written into FlashInfer's cache


def _scoped_store(engine: Any) -> bool:
    """Whether the release can attach a v2 store for one block alone (``cache_scope``: 0.7.4
    can, 0.7.2.post1 cannot). Before it, a store stays attached to the process for good (its
    docstring: "detach is not supported yet") and would catch every later test's tuning."""
    return "cache_scope" in inspect.signature(engine.autotune_v2).parameters


def _v2(engine: Any, store: str) -> Any:
    """``autotune_v2`` tuning into ``store`` for the block where the release can scope it;
    else in memory only (``persistent_cache=False``), which attaches nothing."""
    if _scoped_store(engine):
        return engine.autotune_v2(mode="tune", cache_root=store, cache_scope="context")
    return engine.autotune_v2(mode="tune", persistent_cache=False)


@pytest.mark.parametrize("how", ["v2", "v1 around v2", "v2 around v1"])
def test_under_autotune_v2_each_pinned_key_times_only_its_pin(
    how, recorded, engine, monkeypatch, tmp_path
):
    table, first = recorded
    profiling = toy_op.start(monkeypatch, 7)
    store = str(tmp_path / "store")
    with fi_patches.pinned_tactics(table):
        if how == "v2":
            with _v2(engine, store):
                toy_op.warm_up()
        elif how == "v1 around v2":
            with (
                engine.autotune(True),
                _v2(engine, store),
            ):
                toy_op.warm_up()
        else:
            with (
                _v2(engine, store),
                engine.autotune(True),
            ):
                toy_op.warm_up()
    assert len(profiling.timed) == len(first)  # the default tactic v2 races was not timed
    assert all(t != -1 for _, _, t in profiling.timed)
    if not _scoped_store(engine):  # no store: the winners are in the shared in-memory cache
        assert toy_op.chosen() == first
        return
    entries, _ = read_cache(Path(store))
    stored = {
        (e.key.profile[1][1], e.key.profile[0][0]): (e.runner, e.tactic)
        for e in entries
        if e.key.op == toy_op.OP
    }
    assert stored == {k: (r, fi_patches_tactic(t)) for k, (r, t) in first.items()}


def test_preseed_under_autotune_v2_times_nothing_for_pinned_keys(
    recorded, engine, monkeypatch, tmp_path
):
    table, first = recorded
    profiling = toy_op.start(monkeypatch, 14)
    with fi_patches.pinned_tactics(table, mode="preseed"):
        with _v2(engine, str(tmp_path / "store")):
            toy_op.warm_up()
        assert profiling.timed == []
        toy_op.RAN.calls.clear()
        toy_op.toy_mm(*toy_op.operands(20, toy_op.WEIGHTS[1]))
    runner, tactic = first[(toy_op.WEIGHTS[1], 32)]
    assert [(r, t) for r, _, t in toy_op.RAN.calls] == [(runner, fi_patches_tactic(tactic))]


def test_a_lockfile_of_a_thousand_entries_pins_its_keys_under_the_real_tuner(
    recorded, engine, monkeypatch
):
    """The recorded keys inside a lockfile of 1,000 more entries (other ops and runners, the
    shape of a large model's): later starts still end with every recorded pin, one tactic
    timed per key."""
    table, first = recorded
    decoys = toy_op.decoy_pins(1000)
    big = PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": ""},
            "pin": [p.to_mapping() for p in table.entries("pin")] + decoys,
        },
        source="big.toml",
    )
    profiling = _pinned_start(engine, monkeypatch, big, 15)
    assert toy_op.chosen() == first
    assert len(profiling.timed) == len(first)


def test_runners_made_inside_the_block_are_pinned(recorded, engine, monkeypatch):
    table, first = recorded
    profiling = toy_op.start(monkeypatch, 8)
    toy_op._CLASSES.clear()
    toy_op._RUNNERS.clear()
    with fi_patches.pinned_tactics(table), engine.autotune(True):
        toy_op.warm_up()  # the runner classes are made here, after the block opened
    assert toy_op.chosen() == first
    assert len(profiling.timed) == len(first)


def test_blocks_nest_and_are_local_to_their_thread(recorded, engine, monkeypatch):
    table, _first = recorded
    toy_op.start(monkeypatch, 9)
    tile_runner = toy_op.runners()[0]
    x, w = toy_op.operands(8, toy_op.WEIGHTS[0])
    stock = tile_runner.get_valid_tactics([x, w], None)
    pin = next(p for p in table.entries("pin") if p.runner == "ToyTileRunner")
    inner_tactic = next(t for t in stock if t != pin.tactic)
    inner = PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": ""},
            "pin": [{**pin.to_mapping(), "tactic": list(inner_tactic)}],
        }
    )
    x, w = toy_op.operands(pin.max_rows, pin.shapes.dims[1][1])
    seen: list[Any] = []
    with fi_patches.pinned_tactics(table):
        assert tile_runner.get_valid_tactics([x, w], None) == [pin.tactic]
        with fi_patches.pinned_tactics(inner):
            assert tile_runner.get_valid_tactics([x, w], None) == [inner_tactic]
            thread = threading.Thread(
                target=lambda: seen.append(tile_runner.get_valid_tactics([x, w], None))
            )
            thread.start()
            thread.join()
        assert tile_runner.get_valid_tactics([x, w], None) == [pin.tactic]
    assert seen == [tile_runner.get_valid_tactics([x, w], None)]  # stock in the other thread


def test_a_pin_the_runner_does_not_offer_gives_the_stock_list_and_one_error(
    engine, monkeypatch, caplog
):
    toy_op.start(monkeypatch, 10)
    table = PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": ""},
            "pin": [
                {
                    "op": toy_op.OP,
                    "runner": "ToySplitRunner",
                    "shapes": [["rows", toy_op.K], [toy_op.K, 32]],
                    "max_rows": 64,
                    "tactic": 3,
                }
            ],
        }
    )
    split = toy_op.runners()[1]
    x, w = toy_op.operands(8, 32)
    with caplog.at_level(logging.ERROR, logger="fi_patches"), fi_patches.pinned_tactics(table):
        assert split.get_valid_tactics([x, w], None) == [1, 2, 4]
        assert split.get_valid_tactics([x, w], None) == [1, 2, 4]
    errors = [r for r in caplog.records if "not among the 3 tactics" in r.getMessage()]
    assert len(errors) == 1 and "[[pin]] #1" in errors[0].getMessage()


def _gone_runner_table(on_invalid: str) -> PinTable:
    """A table chosen on FlashInfer 0.7.3 whose second entry names a runner this release lacks
    (for another weight than the first's: a table pins one runner per bucket)."""
    ok = {
        "op": toy_op.OP,
        "runner": "ToySplitRunner",
        "shapes": [["rows", 64], [64, 32]],
        "max_rows": 8,
        "tactic": 2,
    }
    gone = {**ok, "runner": "RunnerRemovedInThisRelease", "shapes": [["rows", 64], [64, 48]]}
    return PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": "==0.7.3", "on_invalid": on_invalid},
            "pin": [ok, {**gone, "min_rows": 2}],
        },
        source="lock.toml",
    )


GONE_KEY = (
    f"op '{toy_op.OP}' runner RunnerRemovedInThisRelease shapes [[\"rows\",64],[64,48]] rows 2..8"
)
"""How the listing names the invalid entry's key: its op, runner, shapes and rows."""


def test_an_upgraded_release_refuses_a_table_naming_a_runner_it_lacks(engine, monkeypatch):
    toy_op.start(monkeypatch, 11)
    toy_op.runners()
    table = _gone_runner_table("refuse")  # it loads: the release's check refuses it
    with pytest.raises(PinTableError) as refused:
        with fi_patches.pinned_tactics(table):
            pytest.fail("a refused table must not be entered")
    text = str(refused.value)
    assert (
        'lock.toml: [[pin]] #2: runner = "RunnerRemovedInThisRelease": is not a runner class'
        in text
    )
    assert f"(its key: {GONE_KEY})" in text and "[[pin]] #1" not in text


def test_on_invalid_tune_applies_the_rest_and_warns_once(engine, monkeypatch, caplog):
    toy_op.start(monkeypatch, 12)
    split = toy_op.runners()[1]
    x, w = toy_op.operands(8, 32)
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        with fi_patches.pinned_tactics(_gone_runner_table("tune")) as active:
            assert active is not None and len(active.entries("pin")) == 1
            assert split.get_valid_tactics([x, w], None) == [2]
    warned = [r.getMessage() for r in caplog.records if "on_invalid = 'tune'" in r.getMessage()]
    assert len(warned) == 1 and '[[pin]] #2: runner = "RunnerRemovedInThisRelease"' in warned[0]
    assert f"(its key: {GONE_KEY})" in warned[0]


def test_a_runner_whose_extras_raise_gets_flashinfers_own_answers(engine, monkeypatch, caplog):
    """A runner defect (its ``get_cache_key_extras`` raising) inside fi_patches' lookups: the
    tuner's lookup and the tactic list are what FlashInfer itself does (its lookup raises the
    runner's error, as it does stock), with one warning each from fi_patches."""
    from flashinfer.autotuner import AutoTuner

    toy_op.start(monkeypatch, 13)
    tile = toy_op.runners()[0]
    entry = {
        "op": toy_op.OP,
        "runner": "ToyTileRunner",
        "shapes": [["rows", toy_op.K], [toy_op.K, 32]],
        "max_rows": 64,
        "extras": "(torch.float32,)",
        "tactic": [16, 2],
    }
    table = PinTable.from_mapping({"meta": {"device": "*", "flashinfer": ""}, "pin": [entry]})

    def broken(self: Any, inputs: Any) -> Any:
        raise RuntimeError("a runner defect")

    x, w = toy_op.operands(8, 32)
    stock = tile.get_valid_tactics([x, w], None)
    monkeypatch.setattr(type(tile), "get_cache_key_extras", broken)
    shapes = ((8, toy_op.K), (toy_op.K, 32))
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        with fi_patches.pinned_tactics(table, mode="preseed"):
            with pytest.raises(RuntimeError, match="a runner defect") as ours:
                AutoTuner.get().search_cache(
                    toy_op.OP, [tile], shapes, toy_op.config(), inputs=[x, w]
                )
            assert tile.get_valid_tactics([x, w], None) == stock
    with pytest.raises(RuntimeError, match="a runner defect") as stock_error:
        AutoTuner.get().search_cache(toy_op.OP, [tile], shapes, toy_op.config(), inputs=[x, w])
    assert str(ours.value) == str(stock_error.value)
    messages = [r.getMessage() for r in caplog.records]
    assert any("could not inspect a tuner cache lookup" in m for m in messages)
    assert any("could not read the problem of ToyTileRunner" in m for m in messages)
