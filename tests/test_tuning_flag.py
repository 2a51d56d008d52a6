"""fi_patches' ``choose_one`` wrapper acts only while FlashInfer's tuner tunes, so it is
installed only then (issue 30: a serving call passes through one wrapper of ours, not two).
``flashinfer.autotune()`` sets the tuner's flag on entry and clears it on exit; the wrapper comes
with the flag and goes with it, and a block entered while the tuner already tunes pins that
tuning. Against FlashInfer's real tuner, profiling simulated on CPU (``tests/toy_op.py``)."""

from __future__ import annotations

import threading
from typing import Any

import fi_patches
from tests import toy_op, toy_pins
from tests.toy_pins import ROWS, N


def _choose_one(engine: Any) -> tuple[str, Any]:
    from flashinfer.autotuner import AutoTuner

    x, w = toy_op.operands(ROWS, N)
    runner, tactic = AutoTuner.get().choose_one(
        toy_op.OP, toy_op.runners(), toy_op.config(), [x, w]
    )
    return type(runner).__name__, tactic


def test_choose_one_is_wrapped_only_while_the_tuner_tunes(engine, monkeypatch):
    toy_op.start(monkeypatch, 61)
    stock = toy_op.tuner_namespace()
    with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToySplitRunner", 4))):
        # serving: FlashInfer's own
        assert toy_op.tuner_namespace()["choose_one"] is stock["choose_one"]
        with engine.autotune(True):
            wrapped = toy_op.tuner_namespace()["choose_one"]
            assert wrapped is not stock["choose_one"]
            assert wrapped.__wrapped__ is stock["choose_one"]
            with engine.autotune(True):  # nested: FlashInfer keeps its flag set
                assert toy_op.tuner_namespace()["choose_one"] is wrapped
            with engine.autotune(False):  # while a tuning context is open, still tuning
                assert toy_op.tuner_namespace()["choose_one"] is wrapped
            assert toy_op.tuner_namespace()["choose_one"] is wrapped
            assert _choose_one(engine) == ("ToySplitRunner", 4)
        assert toy_op.tuner_namespace()["choose_one"] is stock["choose_one"]
        with engine.autotune(True):  # a second tuning gets the same wrapper's behaviour
            assert toy_op.tuner_namespace()["choose_one"].__wrapped__ is stock["choose_one"]
        assert toy_op.tuner_namespace()["choose_one"] is stock["choose_one"]
    after = toy_op.tuner_namespace()
    assert after.keys() == stock.keys()  # the flag's watcher is gone too
    assert all(after[name] is stock[name] for name in stock)


def test_a_block_entered_while_the_tuner_tunes_pins_that_tuning(engine, monkeypatch):
    profiling = toy_op.start(monkeypatch, 62)
    stock = toy_op.tuner_namespace()
    with engine.autotune(True):
        with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToySplitRunner", 4))):
            assert toy_op.tuner_namespace()["choose_one"].__wrapped__ is stock["choose_one"]
            assert _choose_one(engine) == ("ToySplitRunner", 4)
        # Leaving the block while tuning goes on restores FlashInfer's own.
        assert toy_op.tuner_namespace()["choose_one"] is stock["choose_one"]
    assert toy_pins.timed(profiling) == {"ToySplitRunner": {4}}
    assert toy_op.tuner_namespace()["choose_one"] is stock["choose_one"]


def test_process_wide_pins_tune_pinned_and_serve_the_pin_past_flashinfers_choose_one(
    engine, monkeypatch
):
    profiling = toy_op.start(monkeypatch, 63)
    stock = toy_op.tuner_namespace()
    fi_patches.register_pins(toy_pins.table(toy_pins.entry("ToySplitRunner", 2)))
    fi_patches.enable()
    try:
        with engine.autotune(True):
            assert _choose_one(engine) == ("ToySplitRunner", 2)
        assert toy_pins.timed(profiling) == {"ToySplitRunner": {2}}
        assert toy_op.tuner_namespace()["choose_one"] is stock["choose_one"]
        assert _choose_one(engine) == ("ToySplitRunner", 2)  # served, FlashInfer's choose_one
    finally:
        fi_patches.disable()
        fi_patches.register_pins(None)
    after = toy_op.tuner_namespace()
    assert after.keys() == stock.keys() and all(after[name] is stock[name] for name in stock)


def test_while_another_thread_tunes_a_call_here_is_pinned_too(engine, monkeypatch):
    """The flag is the tuner's, not a thread's: while another thread holds ``autotune(True)``,
    a call made here tunes too (FlashInfer's own behaviour), through the wrapper, and its pin
    wins; when that thread leaves, the wrapper goes."""
    profiling = toy_op.start(monkeypatch, 64)
    stock = toy_op.tuner_namespace()
    tuning, done = threading.Event(), threading.Event()

    def tune() -> None:
        with engine.autotune(True):
            tuning.set()
            done.wait(30)

    with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToySplitRunner", 4))):
        holder = threading.Thread(target=tune)
        holder.start()
        try:
            assert tuning.wait(30)
            assert toy_op.tuner_namespace()["choose_one"].__wrapped__ is stock["choose_one"]
            assert _choose_one(engine) == ("ToySplitRunner", 4)
        finally:
            done.set()
            holder.join(30)
        assert toy_op.tuner_namespace()["choose_one"] is stock["choose_one"]
    assert toy_pins.timed(profiling) == {"ToySplitRunner": {4}}
