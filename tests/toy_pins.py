"""Pin tables and serving helpers for tests of the engine on the tests' toy op
(:mod:`tests.toy_op`, FlashInfer's real tuner, profiling simulated): entries pinning the toy
op's key ``(N, ROWS)``, the serving modes the fast path serves, and a block held in another
thread. Shared by the engine's serving, reach, tuning-flag and serving-work tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import fi_patches
from fi_patches.pins import PinTable
from tests import toy_op

N = toy_op.WEIGHTS[0]
ROWS = 8


def table(*entries: dict[str, Any]) -> PinTable:
    """A lockfile of ``[[pin]]`` ``entries``, for any device and release."""
    return PinTable.from_mapping(
        {"meta": {"device": "*", "flashinfer": ""}, "pin": list(entries)}, source="lock.toml"
    )


def entry(runner: str, tactic: Any, **extra: Any) -> dict[str, Any]:
    """A ``[[pin]]`` entry pinning ``runner``'s key ``(N, ROWS)`` of the toy op to ``tactic``."""
    return {
        "op": toy_op.OP,
        "runner": runner,
        "shapes": [["rows", toy_op.K], [toy_op.K, N]],
        "min_rows": ROWS,
        "max_rows": ROWS,
        "tactic": tactic,
        **extra,
    }


def timed(profiling: toy_op.Profiling) -> dict[str, set[Any]]:
    """The tactics the tuner timed at ``ROWS`` rows, per runner class."""
    found: dict[str, set[Any]] = {}
    for runner, rows, tactic in profiling.timed:
        if rows == ROWS:
            found.setdefault(runner, set()).add(tactic)
    return found


STOCK: dict[str, set[Any]] = {
    "ToyTileRunner": {(8, 2), (8, 3), (16, 2), (16, 3), (32, 2), (32, 3)},
    "ToySplitRunner": {1, 2, 4},
}
"""Every tactic the toy op's runners list for 8 rows."""


SERVING_MODES = ("process", "narrow", "preseed")


@contextmanager
def serving(table: PinTable, mode: str) -> Iterator[None]:
    """``table`` in force in ``mode``; left (``disable()`` for process-wide pins) after."""
    if mode == "process":
        fi_patches.register_pins(table)
        fi_patches.enable()
        try:
            yield
        finally:
            fi_patches.disable()
            fi_patches.register_pins(None)
    else:
        with fi_patches.pinned_tactics(table, mode=mode):
            yield


def warmed(engine: Any, monkeypatch: pytest.MonkeyPatch, seed: int = 41) -> dict[Any, Any]:
    """A server's warm-up tuned stock: FlashInfer's cached winners ``(n, bucket) -> (runner
    class, tactic)``."""
    toy_op.start(monkeypatch, seed)
    with engine.autotune(True):
        toy_op.warm_up()
    return toy_op.chosen()


def not_cached(winners: dict[Any, Any], skip: int = 0) -> tuple[str, Any]:
    """A pin for the key ``(N, ROWS)`` that is not FlashInfer's cached winner for it."""
    cached = winners[(N, ROWS)]
    options = [("ToyTileRunner", t) for t in sorted(STOCK["ToyTileRunner"])]
    options += [("ToySplitRunner", t) for t in sorted(STOCK["ToySplitRunner"])]
    return [o for o in options if o != cached][skip]


def ran(x: Any, w: Any) -> list[tuple[str, int, Any]]:
    """The ``(runner class, rows, tactic)`` one call of the toy op really ran."""
    toy_op.RAN.calls.clear()
    toy_op.toy_mm(x, w)
    return list(toy_op.RAN.calls)


def pin_of(runner: str, tactic: Any) -> PinTable:
    """A table pinning the key ``(N, ROWS)`` of ``runner``'s float32 calls to ``tactic``."""
    extras = "(torch.float32,)" if runner == "ToyTileRunner" else "()"
    tactic = list(tactic) if isinstance(tactic, tuple) else tactic
    return table(entry(runner, tactic, extras=extras))


@contextmanager
def held_in_another_thread(
    table: PinTable, inside: Callable[[], Any] = lambda: None
) -> Iterator[Any]:
    """``table`` open in a block of another thread (the wrappers installed, no pins in this one)
    while the body runs; ``inside()`` runs in that block first, and the body gets its result."""
    entered, leave = threading.Event(), threading.Event()
    seen: list[Any] = []

    def hold() -> None:
        with fi_patches.pinned_tactics(table):
            seen.append(inside())
            entered.set()
            leave.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(30)
        yield seen[0]
    finally:
        leave.set()
        holder.join()
