"""Which pin serves a key, against FlashInfer's real tuner (CPU, profiling simulated): an entry
serves only where its runner is among the call's, its extras are that runner's and its tactic is
in that runner's own list; otherwise the key is tuned over every runner's stock list, in narrow
and preseed mode alike. Among entries of several runners for one key the innermost table's
serves. A runner that inherits ``get_valid_tactics`` (FlashInfer's MoE runners share a base's)
is pinned under its own name and left without an attribute of its own on exit."""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any

import pytest

import fi_patches
from tests import toy_op, toy_pins
from tests.toy_pins import ROWS, SERVING_MODES, STOCK, N


def _tune(engine: Any, runners: list[Any] | None = None) -> tuple[Any, Any]:
    """One ``choose_one`` of the toy op at ``ROWS`` rows under ``autotune(True)``."""
    from flashinfer.autotuner import AutoTuner

    x, w = toy_op.operands(ROWS, N)
    with engine.autotune(True):
        runner, tactic = AutoTuner.get().choose_one(
            toy_op.OP, runners or toy_op.runners(), toy_op.config(), [x, w]
        )
    return type(runner).__name__, tactic


def test_a_pin_its_runner_does_not_offer_leaves_the_key_to_every_runner(
    engine, monkeypatch, caplog
):
    profiling = toy_op.start(monkeypatch, 21)
    with caplog.at_level(logging.ERROR, logger="fi_patches"):
        with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToySplitRunner", 3))):
            _tune(engine)
    assert toy_pins.timed(profiling) == STOCK  # the other runner is not silenced by an invalid pin
    errors = [r.getMessage() for r in caplog.records if "not among the 3 tactics" in r.getMessage()]
    assert len(errors) == 1 and "[[pin]] #1" in errors[0]


def test_a_pin_whose_extras_are_not_its_runners_serves_nothing(engine, monkeypatch):
    profiling = toy_op.start(monkeypatch, 22)
    # the call is float32
    wrong = toy_pins.entry("ToyTileRunner", [16, 2], extras="(torch.bfloat16,)")
    with fi_patches.pinned_tactics(toy_pins.table(wrong)):
        _tune(engine)
    assert toy_pins.timed(profiling) == STOCK


def test_a_pin_of_a_runner_the_call_does_not_choose_among_serves_nothing(engine, monkeypatch):
    profiling = toy_op.start(monkeypatch, 23)
    split = toy_op.runners()[1]
    with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToyTileRunner", [16, 2]))):
        chosen = _tune(engine, [split])
    assert toy_pins.timed(profiling) == {"ToySplitRunner": {1, 2, 4}}
    assert chosen[0] == "ToySplitRunner" and chosen[1] in (1, 2, 4)


def test_the_runner_a_pin_names_serves_it_and_the_others_offer_nothing(engine, monkeypatch):
    profiling = toy_op.start(monkeypatch, 24)
    with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToySplitRunner", 4))):
        assert _tune(engine) == ("ToySplitRunner", 4)
    assert toy_pins.timed(profiling) == {"ToySplitRunner": {4}}


def test_between_runners_the_innermost_tables_entry_serves(engine, monkeypatch):
    outer = toy_pins.table(toy_pins.entry("ToyTileRunner", [16, 3]))
    inner = toy_pins.table(toy_pins.entry("ToySplitRunner", 2))
    profiling = toy_op.start(monkeypatch, 25)
    with fi_patches.pinned_tactics(outer):
        with fi_patches.pinned_tactics(inner):
            assert _tune(engine) == ("ToySplitRunner", 2)
        assert toy_pins.timed(profiling) == {"ToySplitRunner": {2}}
        toy_op.start(monkeypatch, 26)  # a fresh cache: the outer table alone now
        profiling = toy_op.start(monkeypatch, 26)
        assert _tune(engine) == ("ToyTileRunner", (16, 3))
    assert toy_pins.timed(profiling) == {"ToyTileRunner": {(16, 3)}}


def test_an_invalid_inner_entry_leaves_the_key_to_the_outer_tables(engine, monkeypatch):
    outer = toy_pins.table(toy_pins.entry("ToyTileRunner", [32, 2]))
    inner = toy_pins.table(toy_pins.entry("ToySplitRunner", 3))  # 3 is not in [1, 2, 4]
    profiling = toy_op.start(monkeypatch, 27)
    with fi_patches.pinned_tactics(outer), fi_patches.pinned_tactics(inner):
        assert _tune(engine) == ("ToyTileRunner", (32, 2))
    assert toy_pins.timed(profiling) == {"ToyTileRunner": {(32, 2)}}


def test_preseed_answers_only_a_pin_its_runner_offers(engine, monkeypatch, caplog):
    from flashinfer.autotuner import AutoTuner

    profiling = toy_op.start(monkeypatch, 28)
    with caplog.at_level(logging.ERROR, logger="fi_patches"):
        with fi_patches.pinned_tactics(
            toy_pins.table(toy_pins.entry("ToySplitRunner", 3)), mode="preseed"
        ):
            tuned = _tune(engine)
            x, w = toy_op.operands(ROWS, N)
            served = AutoTuner.get().choose_one(
                toy_op.OP, toy_op.runners(), toy_op.config(), [x, w]
            )
    assert toy_pins.timed(profiling) == STOCK  # tuned as if unpinned
    assert tuned[1] != 3 and (type(served[0]).__name__, served[1]) == tuned
    assert any("not among the 3 tactics" in r.getMessage() for r in caplog.records)


def test_preseed_serves_a_valid_pin_without_timing_anything(engine, monkeypatch):
    profiling = toy_op.start(monkeypatch, 29)
    with fi_patches.pinned_tactics(
        toy_pins.table(toy_pins.entry("ToySplitRunner", 4)), mode="preseed"
    ):
        assert _tune(engine) == ("ToySplitRunner", 4)
    # the pinned bucket timed nothing (the others were tuned)
    assert toy_pins.timed(profiling) == {}
    assert all(bucket != ROWS for _, bucket in toy_op.chosen())  # and was written nowhere


# A runner that inherits get_valid_tactics --------------------------------------------------------

INHERITED_OP = "fi_patches_toy_inherited"


def _inherited_classes() -> tuple[type, type, type]:
    from flashinfer.autotuner import TunableRunner

    class ToySharedBase(TunableRunner):
        def get_valid_tactics(self, inputs: Any, profile: Any) -> list[int]:
            return [1, 2, 4]

        def forward(self, inputs: Any, tactic: Any = -1, **kw: Any) -> Any:
            return inputs[0] @ inputs[1]

    class ToyInheritingA(ToySharedBase):
        pass

    class ToyInheritingB(ToySharedBase):
        pass

    return ToySharedBase, ToyInheritingA, ToyInheritingB


def test_a_runner_inheriting_its_tactic_list_is_pinned_by_its_own_name(engine, monkeypatch):
    from flashinfer.autotuner import AutoTuner

    base, first, second = _inherited_classes()
    runners = [first(), second()]
    table = toy_pins.table({**toy_pins.entry("ToyInheritingB", 2), "op": INHERITED_OP})
    profiling = toy_op.start(monkeypatch, 30)
    x, w = toy_op.operands(ROWS, N)
    with fi_patches.pinned_tactics(table):
        assert runners[1].get_valid_tactics([x, w], None) == [2]
        assert runners[0].get_valid_tactics([x, w], None) == [1, 2, 4]
        with engine.autotune(True):
            runner, tactic = AutoTuner.get().choose_one(
                INHERITED_OP, runners, toy_op.config(), [x, w]
            )
    assert (type(runner).__name__, tactic) == ("ToyInheritingB", 2)
    assert toy_pins.timed(profiling) == {"ToyInheritingB": {2}}
    for cls in (first, second):  # exact restore: no attribute of their own is left behind
        assert "get_valid_tactics" not in vars(cls)
    assert vars(base)["get_valid_tactics"].__qualname__.endswith("ToySharedBase.get_valid_tactics")


def test_a_lockfile_block_restores_every_object_it_touched(engine, monkeypatch):
    """Exact restore for ``[[pin]]`` entries: FlashInfer's tuner, the runner base and every
    runner class the block wrapped (pinned, or wrapped while its op was tuned) hold the very
    objects they held before."""
    from flashinfer.autotuner import AutoTuner, TunableRunner

    toy_op.start(monkeypatch, 31)
    tile, split = (type(r) for r in toy_op.runners())
    classes = (AutoTuner, TunableRunner, tile, split)
    before = {(c.__qualname__, k): v for c in classes for k, v in vars(c).items()}
    with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToySplitRunner", 4))):
        inside = {(c.__qualname__, k): v for c in classes for k, v in vars(c).items()}
        _tune(engine)
        toy_op.toy_mm(*toy_op.operands(ROWS, N))
    after = {(c.__qualname__, k): v for c in classes for k, v in vars(c).items()}
    changed = {k for k in before if inside.get(k) is not before[k]}
    assert ("AutoTuner", "search_cache") in changed and (
        split.__qualname__,
        "get_valid_tactics",
    ) in changed
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


def test_within_a_table_the_runner_first_in_the_calls_order_serves(engine, monkeypatch):
    """A lockfile recorded from a server that calls one op with two backends pins both runners
    for one key (each tuned apart): a call choosing among both serves the one FlashInfer's own
    lookup would find first, the runner first in the call's list."""
    table = toy_pins.table(
        toy_pins.entry("ToySplitRunner", 2), toy_pins.entry("ToyTileRunner", [16, 2])
    )
    tile, split = toy_op.runners()
    profiling = toy_op.start(monkeypatch, 32)
    with fi_patches.pinned_tactics(table):
        assert _tune(engine, [tile, split]) == ("ToyTileRunner", (16, 2))
    assert toy_pins.timed(profiling) == {"ToyTileRunner": {(16, 2)}}
    profiling = toy_op.start(monkeypatch, 33)
    with fi_patches.pinned_tactics(table):
        assert _tune(engine, [split, tile]) == ("ToySplitRunner", 2)
    assert toy_pins.timed(profiling) == {"ToySplitRunner": {2}}


# Decisions remembered for calls made again ------------------------------------------------------


def _counting_runner(calls: list[str]) -> Any:
    """A runner of the toy op's shape that counts its own tactic listings and extras."""
    from flashinfer.autotuner import TunableRunner

    class ToyCountingRunner(TunableRunner):
        def get_valid_tactics(self, inputs: Any, profile: Any) -> list[int]:
            calls.append("list")
            return [1, 2, 4]

        def get_cache_key_extras(self, inputs: Any) -> tuple[Any, ...]:
            calls.append("extras")
            return (inputs[0].dtype,)

        def forward(self, inputs: Any, tactic: Any = -1, **kw: Any) -> Any:
            return inputs[0] @ inputs[1]

    return ToyCountingRunner()


def test_a_direct_call_made_again_is_answered_without_asking_the_runner_again(engine):
    import torch

    calls: list[str] = []
    runner = _counting_runner(calls)
    entry = {**toy_pins.entry("ToyCountingRunner", 2), "extras": "(torch.float32,)"}
    x, w = toy_op.operands(ROWS, N)
    with fi_patches.pinned_tactics(toy_pins.table(entry)):
        assert runner.get_valid_tactics([x, w], None) == [2]
        first = len(calls)
        for _ in range(5):
            assert runner.get_valid_tactics([x, w], None) == [2]
        assert len(calls) == first  # neither its extras nor its list asked again
        half = [x.to(torch.float16), w.to(torch.float16)]  # the same shapes, another dtype
        assert runner.get_valid_tactics(half, None) == [1, 2, 4]  # its extras do not match


def test_a_remembered_direct_call_serves_only_the_runner_it_was_kept_for(engine):
    """A direct call's answer is remembered under its runner's id, and an id outlives its
    object: a runner of another pinned class made at the freed address gets its own pin, not
    the answer remembered for the runner that was there."""
    _, first_class, second_class = _inherited_classes()
    table = toy_pins.table(
        {**toy_pins.entry("ToyInheritingA", 2), "extras": "()"},
        {**toy_pins.entry("ToyInheritingB", 4), "extras": "()"},
    )
    x, w = toy_op.operands(ROWS, N)
    with fi_patches.pinned_tactics(table):
        first = first_class()
        assert first.get_valid_tactics([x, w], None) == [2]
        assert first.get_valid_tactics([x, w], None) == [2]  # now from the memo
        address = id(first)
        del first
        made = []  # runners at other addresses stay alive, so the freed one comes up
        second = second_class()
        while id(second) != address and len(made) < 1000:
            made.append(second)
            second = second_class()
        assert id(second) == address  # CPython gave the freed address to a new runner
        assert second.get_valid_tactics([x, w], None) == [4]


def test_a_lookup_while_serving_is_decided_once_per_call_signature(engine, monkeypatch):
    import torch
    from flashinfer.autotuner import AutoTuner

    calls: list[str] = []
    runner = _counting_runner(calls)
    entry = {**toy_pins.entry("ToyCountingRunner", 4), "extras": "(torch.float32,)"}
    toy_op.start(monkeypatch, 34)
    x, w = toy_op.operands(ROWS, N)
    tuner = AutoTuner.get()
    with fi_patches.pinned_tactics(toy_pins.table(entry), mode="preseed"):
        assert tuner.choose_one(toy_op.OP, [runner], toy_op.config(), [x, w])[1] == 4
        listed = calls.count("list")
        for _ in range(5):
            assert tuner.choose_one(toy_op.OP, [runner], toy_op.config(), [x, w])[1] == 4
        assert calls.count("list") == listed == 1
        half = [x.to(torch.float16), w.to(torch.float16)]
        assert tuner.choose_one(toy_op.OP, [runner], toy_op.config(), half)[1] == -1  # not pinned


def test_remembered_decisions_are_bounded(engine):
    from fi_patches.pinning import stack
    from fi_patches.pinning.index import MEMO_MAX

    calls: list[str] = []
    runner = _counting_runner(calls)
    with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToyCountingRunner", 2))):
        index = stack.current_index()
        assert index is not None
        for rows in range(1, MEMO_MAX + 50):
            x, w = toy_op.operands(1, N)
            runner.get_valid_tactics([x.expand(rows, toy_op.K), w], None)
        assert 0 < len(index.answers) <= MEMO_MAX


def test_remembered_decisions_let_their_runners_and_classes_go(engine, monkeypatch):
    """Before 0.7.4 FlashInfer builds a runner class per call: a decision remembered for a
    runner (a direct call or a serving lookup) must not keep it, or its class, alive."""
    import gc
    import weakref

    from flashinfer.autotuner import AutoTuner

    entry = {**toy_pins.entry("ToyCountingRunner", 4), "extras": "(torch.float32,)"}
    toy_op.start(monkeypatch, 34)
    x, w = toy_op.operands(ROWS, N)
    tuner = AutoTuner.get()
    gone: list[weakref.ref[Any]] = []
    with fi_patches.pinned_tactics(toy_pins.table(entry), mode="preseed"):
        for _ in range(3):
            runner = _counting_runner([])
            assert runner.get_valid_tactics([x, w], None) == [4]
            assert tuner.choose_one(toy_op.OP, [runner], toy_op.config(), [x, w])[1] == 4
            gone += [weakref.ref(runner), weakref.ref(type(runner))]
            del runner
        gc.collect()
        assert [ref() for ref in gone] == [None] * len(gone)


# Serving lookups in every mode the fast path serves -------------------------------------------
#
# A serving lookup (``choose_one`` outside tuning, on every call of a tuned op) under
# process-wide pins (``fi_patches.enable()`` with a registered table, as ``FI_PATCHES_PINS`` and
# the vLLM/SGLang plugins run), inside a narrowing block and inside a preseed block.


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_serving_runs_the_pin_and_never_a_cached_winner_that_is_not_it(engine, monkeypatch, mode):
    winners = toy_pins.warmed(engine, monkeypatch)
    runner, pin = toy_pins.not_cached(winners)
    x, w = toy_op.operands(ROWS, N)
    stock = toy_pins.ran(x, w)
    assert stock == [(*winners[(N, ROWS)][:1], ROWS, winners[(N, ROWS)][1])]
    with toy_pins.serving(toy_pins.pin_of(runner, pin), mode):
        for _ in range(3):  # decided, then answered from the remembered decision
            assert toy_pins.ran(x, w) == [(runner, ROWS, pin)]
        # a lookup passing FlashInfer's further arguments is answered alike
        from flashinfer.autotuner import AutoTuner

        shapes = ((ROWS, toy_op.K), (toy_op.K, N))
        found = AutoTuner.get().search_cache(
            toy_op.OP,
            toy_op.runners(),
            shapes,
            toy_op.config(),
            inputs=[x, w],
            require_profiling_policy=False,
        )
        assert found[:3] == (True, ["ToyTileRunner", "ToySplitRunner"].index(runner), pin)
    assert toy_pins.ran(x, w) == stock


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_serving_leaves_unpinned_keys_flashinfers_own_answer(engine, monkeypatch, mode):
    import torch
    from flashinfer.autotuner import AutoTuner

    winners = toy_pins.warmed(engine, monkeypatch)
    runner, pin = toy_pins.not_cached(winners)
    tuner, config = AutoTuner.get(), toy_op.config()
    tile, split = toy_op.runners()
    x, w = toy_op.operands(ROWS, N)
    op = toy_op.OP
    calls = [
        (op, [tile, split], list(toy_op.operands(ROWS, toy_op.WEIGHTS[1]))),  # another weight
        (op, [tile, split], list(toy_op.operands(2 * ROWS, N))),  # rows outside the entry
        (op, [tile], [x.to(torch.float16), w.to(torch.float16)]),  # another key (extras)
        (op, [split] if runner == "ToyTileRunner" else [tile], [x, w]),  # the pin's runner absent
        (f"{op}_unpinned", [tile, split], [x, w]),  # an op no entry pins, at the pinned shapes
    ]
    stock = [tuner.choose_one(o, r, config, i) for o, r, i in calls]
    with toy_pins.serving(toy_pins.pin_of(runner, pin), mode):
        for _ in range(2):
            assert [tuner.choose_one(o, r, config, i) for o, r, i in calls] == stock
        assert tuner.choose_one(toy_op.OP, [tile, split], config, [x, w])[1] == pin


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_serving_exit_restores_the_exact_original_objects(engine, monkeypatch, mode):
    from flashinfer.autotuner import AutoTuner, TunableRunner

    winners = toy_pins.warmed(engine, monkeypatch)
    tile, split = (type(r) for r in toy_op.runners())
    classes = (AutoTuner, TunableRunner, tile, split)
    before = {(c.__qualname__, k): v for c in classes for k, v in vars(c).items()}
    with toy_pins.serving(toy_pins.pin_of(*toy_pins.not_cached(winners)), mode):
        inside = {(c.__qualname__, k): v for c in classes for k, v in vars(c).items()}
        toy_op.toy_mm(*toy_op.operands(ROWS, N))
    after = {(c.__qualname__, k): v for c in classes for k, v in vars(c).items()}
    assert inside[("AutoTuner", "search_cache")] is not before[("AutoTuner", "search_cache")]
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_serving_pins_stay_in_their_context_and_nest(engine, monkeypatch, mode):
    """A block's pins serve its own context only; process-wide pins serve every thread, also
    while another thread has a block open. An inner block wins for its keys, and once it is
    left the outer pin serves again (no decision of the inner block's is served after it)."""
    winners = toy_pins.warmed(engine, monkeypatch)
    outer, inner = toy_pins.not_cached(winners), toy_pins.not_cached(winners, skip=1)
    x, w = toy_op.operands(ROWS, N)
    stock = toy_pins.ran(x, w)
    seen: list[Any] = []

    def elsewhere() -> None:
        seen.append(toy_pins.ran(x, w))

    with toy_pins.serving(toy_pins.pin_of(*outer), mode):
        assert toy_pins.ran(x, w) == [(outer[0], ROWS, outer[1])]
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        for nested in ("narrow", "preseed"):
            with fi_patches.pinned_tactics(toy_pins.pin_of(*inner), mode=nested):
                assert toy_pins.ran(x, w) == [(inner[0], ROWS, inner[1])]
                if mode == "process":  # another thread's block leaves this thread's pins be
                    thread = threading.Thread(target=elsewhere)
                    thread.start()
                    thread.join()
            assert toy_pins.ran(x, w) == [(outer[0], ROWS, outer[1])]
    expected = [(outer[0], ROWS, outer[1])] if mode == "process" else stock
    assert seen == [expected] * len(seen) and len(seen) == (3 if mode == "process" else 1)
    assert toy_pins.ran(x, w) == stock


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_serving_lookups_keep_candidate_lists_rank_consistent(engine, monkeypatch, mode):
    """Two ranks whose own tunes disagree, one of which served the pinned key before tuning it
    (its decision remembered), tune and serve the key alike under the same pins: the pin alone
    is profiled (nothing under preseed), and the pin serves."""
    from flashinfer.autotuner import AutoTuner

    ranks = []
    for seed in (51, 52):
        winners = toy_pins.warmed(engine, monkeypatch, seed)
        ranks.append(winners[(N, ROWS)])
    assert ranks[0] != ranks[1]  # the seeds' fresh tunes disagree on the key
    runner, pin = "ToyTileRunner", (16, 3)
    x, w = toy_op.operands(ROWS, N)
    outcomes = []
    for seed, served_first in ((51, True), (52, False)):
        profiling = toy_op.start(monkeypatch, seed)
        with toy_pins.serving(toy_pins.pin_of(runner, pin), mode):
            if served_first:
                assert toy_pins.ran(x, w) == [(runner, ROWS, pin)]
            with engine.autotune(True):
                toy_op.toy_mm(x, w)
            outcomes.append((toy_pins.timed(profiling), toy_pins.ran(x, w)))
            assert (
                AutoTuner.get().choose_one(toy_op.OP, toy_op.runners(), toy_op.config(), [x, w])[1]
                == pin
            )
    timed = {} if mode == "preseed" else {runner: {pin}}
    assert outcomes == [(timed, [(runner, ROWS, pin)])] * 2


@pytest.mark.parametrize("mode", SERVING_MODES)
@pytest.mark.parametrize("call", ["lookup", "direct"])
def test_serving_sees_tables_disable_enable_and_refresh_on_the_next_call(
    engine, monkeypatch, mode, call
):
    """A serving lookup (``choose_one`` outside tuning) and a direct ``get_valid_tactics`` call
    (as FlashInfer's own ops make outside the tuner) alike read the pins in force in every mode:
    the pin while they serve, its decision remembered until ``refresh()``, FlashInfer's answer
    after ``disable()``, and the pin again after ``enable()`` where it brings them back
    (process-wide pins; a block ``disable()`` made inert stays inert until it exits)."""
    from flashinfer.autotuner import AutoTuner

    calls: list[str] = []
    counting = _counting_runner(calls)
    toy_op.start(monkeypatch, 61)
    x, w = toy_op.operands(ROWS, N)
    tuner, config = AutoTuner.get(), toy_op.config()

    def served() -> Any:
        if call == "lookup":
            return tuner.choose_one(toy_op.OP, [counting], config, [x, w])[1]
        return list(counting.get_valid_tactics([x, w], None))

    pinned = 4 if call == "lookup" else [4]
    stock = served()
    table = toy_pins.table({**toy_pins.entry("ToyCountingRunner", 4), "extras": "(torch.float32,)"})
    with toy_pins.serving(table, mode):  # loaded after the call above
        assert served() == pinned
        listed = calls.count("list")
        assert served() == pinned and calls.count("list") == listed  # remembered
        fi_patches.refresh()
        assert served() == pinned and calls.count("list") == listed + 1  # decided afresh
        fi_patches.disable()
        assert served() == stock
        fi_patches.enable()
        assert served() == (pinned if mode == "process" else stock)
    fi_patches.disable()
    assert served() == stock


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_a_pin_the_runners_own_check_rejects_gets_flashinfers_answer(engine, monkeypatch, mode):
    """FlashInfer asks a runner's ``validate_tactic`` of a cached winner on every lookup; a pin
    it rejects (or a check that raises) leaves that call to FlashInfer, and nothing raises."""
    from flashinfer.autotuner import AutoTuner, TunableRunner

    verdict: list[Any] = [True]

    class ToyCheckingRunner(TunableRunner):
        def get_valid_tactics(self, inputs: Any, profile: Any) -> list[int]:
            return [1, 2, 4]

        def validate_tactic(self, inputs: Any, tactic: Any) -> bool:
            if isinstance(verdict[0], Exception):
                raise verdict[0]
            return bool(verdict[0])

        def forward(self, inputs: Any, tactic: Any = -1, **kw: Any) -> Any:
            return inputs[0] @ inputs[1]

    runner = ToyCheckingRunner()
    toy_op.start(monkeypatch, 62)
    x, w = toy_op.operands(ROWS, N)
    tuner, config = AutoTuner.get(), toy_op.config()
    stock = tuner.choose_one(toy_op.OP, [runner], config, [x, w])
    with toy_pins.serving(toy_pins.table(toy_pins.entry("ToyCheckingRunner", 2)), mode):
        assert tuner.choose_one(toy_op.OP, [runner], config, [x, w])[1] == 2
        verdict[0] = False
        assert tuner.choose_one(toy_op.OP, [runner], config, [x, w]) == stock
        verdict[0] = RuntimeError("no")
        assert tuner.choose_one(toy_op.OP, [runner], config, [x, w]) == stock
        verdict[0] = True
        assert tuner.choose_one(toy_op.OP, [runner], config, [x, w])[1] == 2


def _runner_named(name: str) -> Any:
    return toy_op.runners()[["ToyTileRunner", "ToySplitRunner"].index(name)]


def test_a_thread_without_pins_gets_flashinfers_own_answers_while_another_holds_a_block(
    engine, monkeypatch
):
    """With a block open in another thread only (the wrappers installed, the probes passing for
    the very key it pins), this thread's lookups, with or without FlashInfer's further keyword
    arguments, and the pinned runner's own list are FlashInfer's, as stock; the block's thread
    is served its pin meanwhile."""
    from flashinfer.autotuner import AutoTuner

    winners = toy_pins.warmed(engine, monkeypatch)
    runner, pin = toy_pins.not_cached(winners)
    tuner, config, runners = AutoTuner.get(), toy_op.config(), toy_op.runners()
    pinned, plain = _runner_named(runner), _plain_runner()
    x, w = toy_op.operands(ROWS, N)
    shapes = ((ROWS, toy_op.K), (toy_op.K, N))
    extras = "(torch.float32,)" if runner == "ToyTileRunner" else "()"
    listed = list(pin) if isinstance(pin, tuple) else pin
    table = toy_pins.table(
        toy_pins.entry(runner, listed, extras=extras), toy_pins.entry("ToyPlainRunner", 2)
    )
    stock_method = AutoTuner.__dict__["search_cache"]

    # The lookup's further keyword arguments, as far as this release's search_cache takes them
    # (0.7.4 added require_profiling_policy and validation_profile).
    takes = inspect.signature(stock_method).parameters
    further: list[dict[str, Any]] = [
        kw
        for kw in ({"require_profiling_policy": True}, {"validation_profile": None})
        if all(name in takes for name in kw)
    ]

    def answers() -> list[Any]:
        lookups = [tuner.search_cache(toy_op.OP, runners, shapes, config)]
        if "inputs" in takes:
            lookups.append(tuner.search_cache(toy_op.OP, runners, shapes, config, [x, w]))
            lookups += [
                tuner.search_cache(toy_op.OP, runners, shapes, config, inputs=[x, w], **kw)
                for kw in further
            ]
        return [
            tuner.choose_one(toy_op.OP, runners, config, [x, w]),
            *lookups,
            pinned.get_valid_tactics([x, w], None),
            plain.get_valid_tactics([x, w], None),
            toy_pins.ran(x, w),
        ]

    stock = answers()

    def inside() -> list[Any]:
        return [
            toy_pins.ran(x, w),
            pinned.get_valid_tactics([x, w], None),
            plain.get_valid_tactics([x, w], None),
        ]

    with toy_pins.held_in_another_thread(table, inside) as seen:
        assert AutoTuner.__dict__["search_cache"] is not stock_method  # the wrappers are in
        for _ in range(2):  # decided, then the same from the fast path
            assert answers() == stock
    assert seen == [[(runner, ROWS, pin)], [pin], [2]]
    assert answers() == stock


def _plain_runner() -> Any:
    """A runner whose ``get_valid_tactics`` takes exactly ``(self, inputs, profile)``, as
    FlashInfer's own runners' do (the form the lean runner wrapper serves)."""
    from flashinfer.autotuner import TunableRunner

    class ToyPlainRunner(TunableRunner):
        def get_valid_tactics(self, inputs: Any, profile: Any) -> list[int]:
            return [1, 2, 4]

        def forward(self, inputs: Any, tactic: Any = -1, **kw: Any) -> Any:
            return inputs[0] @ inputs[1]

    return ToyPlainRunner()


def test_process_wide_pins_serve_a_thread_without_a_block_while_another_holds_one(
    engine, monkeypatch
):
    """Process-wide pins with a block of another table open in another thread: a thread
    without a block is served the process-wide pin, by the lookup and by the runner's own list
    (the context is read, then the process-wide tables), while the block's thread is served
    the block's."""
    from flashinfer.autotuner import AutoTuner

    toy_op.start(monkeypatch, 63)
    runner = _plain_runner()
    tuner, config = AutoTuner.get(), toy_op.config()
    x, w = toy_op.operands(ROWS, N)

    def served() -> tuple[Any, list[Any]]:
        return (
            tuner.choose_one(toy_op.OP, [runner], config, [x, w])[1],
            runner.get_valid_tactics([x, w], None),
        )

    stock = served()
    entered, leave = threading.Event(), threading.Event()
    inside: list[Any] = []

    def hold() -> None:
        with fi_patches.pinned_tactics(toy_pins.table(toy_pins.entry("ToyPlainRunner", 4))):
            inside.append(served())
            entered.set()
            leave.wait()

    with toy_pins.serving(toy_pins.table(toy_pins.entry("ToyPlainRunner", 2)), "process"):
        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert entered.wait(30)
            for _ in range(2):
                assert served() == (2, [2])
        finally:
            leave.set()
            holder.join()
    assert inside == [(4, [4])]
    assert served() == stock and stock[1] == [1, 2, 4]
