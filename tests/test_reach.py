"""The reach test of a serving lookup (issue 30): a key of a pinned op that no entry could pin is
told from one input's shape as the call has it, without the memo, and only from an input whose
shape FlashInfer's key profile keeps as the call's. Against FlashInfer's real tuner (CPU,
profiling simulated); the fault case edits FlashInfer's profile in a child process."""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fi_patches.internals import tuner as fi_tuner
from tests import toy_op, toy_pins
from tests.toy_pins import SERVING_MODES, N

REPO = Path(__file__).resolve().parent.parent


def _specs() -> tuple[Any, Any, Any]:
    from flashinfer.autotuner import ConstraintSpec, DynamicTensorSpec, TuningConfig

    return ConstraintSpec, DynamicTensorSpec, TuningConfig


def test_shaped_inputs_names_every_input_whose_shape_the_profile_changes(engine):
    """Over configs of FlashInfer's own spec classes (linked dimensions, constraints, negative
    indices), every input ``shaped_inputs`` leaves out keeps the call's shape in the profile
    FlashInfer keys the call on, and each input it names is one a profile changed."""
    constraint, dynamic, config_class = _specs()
    rows = dynamic((0, -1), (0, 0), lambda n: (1, 2, 4, 8), toy_op._bucket)
    configs = {
        "rows of the first and last input": config_class(dynamic_tensor_specs=(rows,)),
        "and a constrained dimension": config_class(
            dynamic_tensor_specs=(rows,),
            constraint_specs=(constraint(2, 0, lambda shapes: shapes[0][0] * 2),),
        ),
        "a constraint at a negative index": config_class(
            constraint_specs=(constraint(-2, 1, lambda shapes: 0),)
        ),
    }
    tuner = fi_tuner.tuner()
    for name, config in configs.items():
        shaped = fi_tuner.shaped_inputs(config, 4)
        assert shaped is not None, name
        changed: set[int] = set()
        for m, k, n in itertools.product((3, 5, 8), (64, 96), (33, 48)):
            shapes = ((m, k), (k, n), (2 * m, 7), (m, n))
            profile = fi_tuner.nearest_profile(tuner, shapes, config)
            for i, (call, keyed) in enumerate(zip(shapes, profile, strict=True)):
                if i not in shaped:
                    assert tuple(keyed) == call, (name, i, shapes, profile)
                elif tuple(keyed) != call:
                    changed.add(i)
        assert changed == shaped, (name, changed, shaped)
    assert fi_tuner.shaped_inputs(object(), 2) is None  # not a config: no reach test


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_a_key_named_by_a_bucketed_input_alone_is_served_its_pin(engine, monkeypatch, caplog, mode):
    """A ``[[pin]]`` fixing whole only the tuned input (its bucket, 8 rows) and any weight serves
    a call of 6 rows, which FlashInfer keys as 8: the reach test never reads an input the
    config buckets, so it passes such a call on to the full search."""
    winners = toy_pins.warmed(engine, monkeypatch)
    runner, pin = toy_pins.not_cached(winners)
    extras = "(torch.float32,)" if runner == "ToyTileRunner" else "()"
    entry = {
        "op": toy_op.OP,
        "runner": runner,
        "shapes": [[8, toy_op.K], [toy_op.K, "*"]],
        "tactic": list(pin) if isinstance(pin, tuple) else pin,
        "extras": extras,
    }
    x, w = toy_op.operands(6, N)
    stock = [(*winners[(N, 8)][:1], 6, winners[(N, 8)][1])]  # the winner
    assert toy_pins.ran(x, w) == stock
    with (
        caplog.at_level(logging.INFO, logger="fi_patches"),
        toy_pins.serving(toy_pins.table(entry), mode),
    ):
        # 8 rows first: a call whose bucketed input has the key's shape as it is
        assert toy_pins.ran(*toy_op.operands(8, N)) == [(runner, 8, pin)]
        for _ in range(3):  # decided, then answered from the remembered decision
            assert toy_pins.ran(x, w) == [(runner, 6, pin)]
    assert not [r for r in caplog.records if "reach test would read" in r.getMessage()]


def test_ops_named_at_run_time_keep_the_reach_map_bounded(engine, monkeypatch):
    """A host that builds op names at run time looks up ever new ops: the index's reach map
    (an op no pin may apply to is kept on its first lookup) starts again past its bound, as
    every memo does, and the pinned key is still served its pin after."""
    from flashinfer.autotuner import AutoTuner

    from fi_patches.pinning import index as pin_index
    from fi_patches.pinning import stack

    monkeypatch.setattr(pin_index, "MEMO_MAX", 16)
    winners = toy_pins.warmed(engine, monkeypatch)
    runner, pin = toy_pins.not_cached(winners)
    table = toy_pins.pin_of(runner, pin)
    x, w = toy_op.operands(8, N)
    tuner, config, runners = AutoTuner.get(), toy_op.config(), toy_op.runners()
    with toy_pins.serving(table, "process"):
        assert toy_pins.ran(x, w) == [(runner, 8, pin)]
        index = stack.current_index()
        assert index is not None
        sizes = []
        for i in range(40):
            tuner.choose_one(f"{toy_op.OP}_built_{i}", runners, config, [x, w])
            sizes.append(len(index.reach))
        assert max(sizes) <= 16, sizes
        assert any(after < before for before, after in itertools.pairwise(sizes)), sizes
        assert index.reach[f"{toy_op.OP}_built_0"] is pin_index.UNSERVED
        assert toy_pins.ran(x, w) == [(runner, 8, pin)]


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_keys_the_reach_test_passes_on_are_decided_as_before(engine, monkeypatch, mode):
    """Through the reach test: the pinned key is served its pin; the pinned weight at rows the
    entry does not cover (passes the test, decided in the memo) and another weight (stopped
    by the test) get FlashInfer's cached winners, call after call."""
    winners = toy_pins.warmed(engine, monkeypatch)
    runner, pin = toy_pins.not_cached(winners)
    other_weight = toy_op.WEIGHTS[1]
    with toy_pins.serving(toy_pins.pin_of(runner, pin), mode):
        for _ in range(3):
            assert toy_pins.ran(*toy_op.operands(8, N)) == [(runner, 8, pin)]
            for rows, n in ((64, N), (8, other_weight), (64, other_weight)):
                cached = winners[(n, rows)]
                assert toy_pins.ran(*toy_op.operands(rows, n)) == [(cached[0], rows, cached[1])]


CHILD = """
import logging, os, sys
sys.path.insert(0, os.getcwd())
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
import flashinfer, pytest
from flashinfer.autotuner import AutoTuner
import fi_patches
from tests import toy_op, toy_pins

# The fault: FlashInfer's profile keys a weight 48 wide as 64 wide, which the op's tuning config
# does not name (a release keying more than its specs say; the compat check's probe shapes,
# 32 wide, are left as they are, so the engine stays on).
stock = AutoTuner.__dict__["_find_nearest_profile"].__func__

def rounded(cls, shapes, tuning_config):
    found = [list(s) for s in stock(cls, shapes, tuning_config)]
    if found[1][1] == 48:
        found[1][1] = 64
    return tuple(tuple(s) for s in found)

AutoTuner._find_nearest_profile = classmethod(rounded)
monkeypatch = pytest.MonkeyPatch()
toy_op.start(monkeypatch, 41)
with flashinfer.autotune(True):
    toy_op.warm_up()
x, w = toy_op.operands(8, 48)  # keyed as width 64 by the edited profile
stock_ran = toy_pins.ran(x, w)[0]
tactic = next(t for t in (1, 2, 4) if (stock_ran[0], stock_ran[2]) != ("ToySplitRunner", t))
entry = {"op": toy_op.OP, "runner": "ToySplitRunner", "min_rows": 8, "max_rows": 8,
         "shapes": [["rows", toy_op.K], [toy_op.K, 64]], "tactic": tactic, "extras": "()"}
with fi_patches.pinned_tactics(toy_pins.table(entry)):
    ran = [toy_pins.ran(x, w)[0] for _ in range(3)]
print("STOCK", stock_ran, "PIN", tactic, "RAN", ran == [("ToySplitRunner", 8, tactic)] * 3, ran)
"""


def test_a_profile_that_changes_an_unnamed_input_leaves_the_op_to_the_memo(engine):
    """FlashInfer edited (in a child process) so its key profile changes the weight's shape,
    which the op's config does not name: the first decided call shows it, the reach test is
    not learned (said once, at INFO), and the pin keyed on the changed shape is served."""
    env = {**os.environ, "FI_PATCHES_DEVICE": os.environ.get("FI_PATCHES_DEVICE", "sm_103")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RAN True" in done.stdout, done.stdout + done.stderr[-3000:]  # the pin, each call
    said = [line for line in done.stderr.splitlines() if "reach test would read" in line]
    assert len(said) == 1 and toy_op.OP in said[0], done.stderr[-3000:]
