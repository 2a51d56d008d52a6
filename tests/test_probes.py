"""The wrappers' first test (the probe of every table some scope may consult): whatever a
``[[pin]]`` entry fixes (a whole input, one dimension, nothing) and whoever holds its table
(another thread, the same table twice, ``isolated``), a pinned call gets its pin, an unpinned
one the stock list, and a table leaves the probe with its last holder; while tuning, a runner
whose own probe misses still yields to another runner's pin.

Direct calls of the tests' own runners (real ``TunableRunner`` subclasses, ``tests/toy_op.py``)
with real FlashInfer 0.7.x; no profiling is needed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import fi_patches
from fi_patches.pinning import stack
from fi_patches.pins import PinTable
from tests import toy_op
from tests.conftest import flashinfer_or_skip, require_feature
from tests.workers import workers

K = toy_op.K
STOCK = [1, 2, 4]


@pytest.fixture
def split(sm103: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    flashinfer_or_skip()
    require_feature("pinned_ops")
    toy_op.start(monkeypatch, 21)
    return toy_op.runners()[1]


def _table(*entries: tuple[list[Any], int]) -> PinTable:
    return PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": ""},
            "pin": [
                {
                    "op": toy_op.OP,
                    "runner": "ToySplitRunner",
                    "shapes": shapes,
                    "max_rows": 64,
                    "tactic": tactic,
                }
                for shapes, tactic in entries
            ],
        }
    )


def _tactics(runner: Any, n: int, rows: int = 8) -> list[Any]:
    x, w = toy_op.operands(rows, n)
    return list(runner.get_valid_tactics([x, w], None))


WHOLE = [["rows", K], [K, 32]]
"""The weight fixed whole: the probe reads its shape."""
ONE_DIM = [["rows", "*"], ["*", 32]]
"""Only the weight's ``n`` fixed: the probe reads that dimension."""
NOTHING = [["rows", "*"], ["*", "*"]]
"""Nothing fixed: every call takes the full search."""


@pytest.mark.parametrize(
    ("shapes", "at_48"),
    [(WHOLE, STOCK), (ONE_DIM, STOCK), (NOTHING, [2])],
    ids=["whole-input", "one-dimension", "nothing-fixed"],
)
def test_each_form_of_entry_pins_its_calls_and_no_others(split, shapes, at_48):
    with fi_patches.pinned_tactics(_table((shapes, 2))):
        assert _tactics(split, 32) == [2]
        assert _tactics(split, 48) == at_48
        assert _tactics(split, 32, rows=100) == STOCK  # above max_rows
    assert _tactics(split, 32) == STOCK


def test_entries_of_different_forms_for_one_runner_each_pin_their_weight(split):
    table = _table((WHOLE, 2), ([["rows", "*"], ["*", 48]], 4))
    with fi_patches.pinned_tactics(table):
        assert (_tactics(split, 32), _tactics(split, 48), _tactics(split, 40)) == ([2], [4], STOCK)


def test_a_non_tensor_where_a_pin_reads_a_shape_gets_the_stock_list_quietly(split, caplog):
    x, _ = toy_op.operands(8, 32)
    for shapes, with_none in ((WHOLE, STOCK), (ONE_DIM, STOCK), (NOTHING, [2])):
        with caplog.at_level(logging.WARNING, logger="fi_patches"):
            with fi_patches.pinned_tactics(_table((shapes, 2))):
                # An input of wildcards only is never read: any value matches it.
                assert split.get_valid_tactics([x, None], None) == with_none
                assert split.get_valid_tactics([x, x.t()], None) == with_none  # rank 2, 8 x 64
                assert split.get_valid_tactics([x[0], None], None) == STOCK  # rows input 1-D
                assert split.get_valid_tactics([x], None) == STOCK
    assert [r.getMessage() for r in caplog.records if r.name.startswith("fi_patches")] == []


def _in_thread(call: Callable[[], Any]) -> Any:
    seen: list[Any] = []
    with workers() as pool:
        pool.start(lambda: seen.append(call()))
    return seen[0]


def _holding(table: PinTable, entered: threading.Event, leave: threading.Event) -> None:
    with fi_patches.pinned_tactics(table):
        entered.set()
        assert leave.wait(30), "the test never let the holder leave"


def test_a_pin_held_by_another_thread_leaves_this_one_stock(split):
    entered, leave = threading.Event(), threading.Event()
    with workers(name="holder") as pool:
        pool.start(_holding, _table((WHOLE, 2)), entered, leave)
        try:
            assert entered.wait(30)
            assert _tactics(split, 32) == STOCK
        finally:
            leave.set()


@pytest.mark.parametrize("same_table", [True, False], ids=["same-table", "two-tables"])
def test_a_block_leaving_keeps_the_pins_of_blocks_still_open(split, same_table):
    first = _table((WHOLE, 2))
    second = first if same_table else _table((WHOLE, 4))
    entered, leave = threading.Event(), threading.Event()
    with workers(name="holder") as pool:
        pool.start(_holding, first, entered, leave)
        try:
            assert entered.wait(30)
            with fi_patches.pinned_tactics(second):
                leave.set()
                pool.join()  # the other thread's block has left while this one is open
                assert _tactics(split, 32) == ([2] if same_table else [4])
        finally:
            leave.set()
    assert _tactics(split, 32) == STOCK
    assert stack.probe_cell("ToySplitRunner") == {}  # no table left behind


def test_isolated_tables_pin_and_leave_with_their_block(split):
    table = _table((WHOLE, 2))
    with fi_patches.pinned_tactics(_table((WHOLE, 4))):
        with stack.isolated(table):
            assert _tactics(split, 32) == [2]
            assert _in_thread(lambda: _tactics(split, 32)) == STOCK
        with stack.isolated():
            assert _tactics(split, 32) == STOCK
        assert _tactics(split, 32) == [4]
    assert stack.probe_cell("ToySplitRunner") == {}


def test_while_tuning_a_runner_whose_own_pins_miss_still_yields_to_another_runners_pin(
    split, monkeypatch
):
    """ToyTileRunner pinned for one weight and ToySplitRunner for the other: tuning the second
    weight, the tile runner (its probe misses) must offer nothing, so the tuner profiles the
    split runner's pin alone."""
    import flashinfer

    profiling = toy_op.start(monkeypatch, 22)
    entry = {"op": toy_op.OP, "max_rows": 64, "min_rows": 1}
    table = PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": ""},
            "pin": [
                {**entry, "runner": "ToyTileRunner", "shapes": WHOLE, "tactic": [32, 3]},
                {
                    **entry,
                    "runner": "ToySplitRunner",
                    "shapes": [["rows", K], [K, 48]],
                    "tactic": 4,
                },
            ],
        }
    )
    with fi_patches.pinned_tactics(table), flashinfer.autotune(True):
        toy_op.warm_up((8,))
    pins = {32: ("ToyTileRunner", (32, 3)), 48: ("ToySplitRunner", 4)}
    chosen = toy_op.chosen()
    assert {n for n, _ in chosen} == {32, 48}
    assert all(winner == pins[n] for (n, _), winner in chosen.items()), chosen
    assert {(r, t) for r, _, t in profiling.timed} == set(pins.values())
    assert len(profiling.timed) == len(chosen)  # one tactic profiled per key: its pin
