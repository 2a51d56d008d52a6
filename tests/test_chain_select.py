"""Selection by coordinate descent, tie handling and provenance, with measurements injected
through the Timer interface (a cost model; no GPU, no FlashInfer)."""

from __future__ import annotations

import logging

import pytest

from fi_patches.chain.select import (
    CURRENT_PIN,
    ENUMERATOR_ORDER,
    FASTEST,
    Stats,
    candidates_for,
    choose,
    tune,
)
from fi_patches.chain.spec import Settings, TuneError
from tests.chain_helpers import CostTimer, additive, bucket, op, slots

# Nothing here depends on the installed FlashInfer release (see pyproject.toml).
pytestmark = pytest.mark.release_independent

SPLIT = ("split", 1), ("split", 2), ("split", 4), ("slow", 1)

# Alone, split-K 4 is fastest for every op; followed by another op it pays for the lost
# overlap, so in the chain only the last op keeps it. ("slow", 1) is slower everywhere.
ALONE = {"split": {("split", 1): 10.0, ("split", 2): 9.0, ("split", 4): 8.0, ("slow", 1): 20.0}}
COSTS = {name: ALONE["split"] for name in ("a", "b", "c")}
AFTER = {name: {("split", 2): 1.5, ("split", 4): 3.0} for name in ("a", "b", "c")}


def chain_plan(pins=None):
    ops = [op(name, SPLIT) for name in ("a", "b", "c")]
    return [(bucket(8), slots(*ops, pins=pins))]


def settings(**kwargs):
    return Settings(**{"repeats": 3, "tie_tolerance": 0.01, **kwargs})


def test_chain_descent_and_isolated_choose_differently():
    timer = CostTimer(additive(COSTS, AFTER), noise=0.002)
    [chain] = tune(chain_plan(), timer, settings())
    assert chain.mode == "chain" and chain.converged
    assert chain.chosen == {"a": ("split", 1), "b": ("split", 1), "c": ("split", 4)}
    assert chain.chain_median_us == pytest.approx(28.0, rel=0.01)
    [alone] = tune(chain_plan(), CostTimer(additive(COSTS, AFTER)), settings(), isolated=True)
    assert alone.mode == "isolated"
    assert alone.chosen == {"a": ("split", 4), "b": ("split", 4), "c": ("split", 4)}
    assert alone.chain_median_us is None


def test_isolated_trials_hold_one_op_and_chain_trials_all():
    timer = CostTimer(additive(COSTS, AFTER))
    tune(chain_plan(), timer, settings(), isolated=True)
    assert {trial.names for trial in timer.prepared} == {("a",), ("b",), ("c",)}
    timer = CostTimer(additive(COSTS, AFTER))
    tune(chain_plan(), timer, settings())
    assert {trial.names for trial in timer.prepared} == {("a", "b", "c")}


def test_the_slower_tactic_is_never_chosen():
    for isolated in (False, True):
        results = tune(
            chain_plan(),
            CostTimer(additive(COSTS, AFTER), noise=0.01, seed=3),
            settings(),
            isolated=isolated,
        )
        assert ("slow", 1) not in results[0].chosen.values()


def test_descent_repeats_until_no_op_changes_and_skips_unchanged_contexts():
    timer = CostTimer(additive(COSTS, AFTER))
    [result] = tune(chain_plan(), timer, settings())
    # pass 1 moves c to split 4 (a and b stay at their first tactic); pass 2 re-times a and b
    # (c changed since they were chosen) and c is not re-timed (a and b did not change).
    assert [(s.pass_number, s.coordinate) for s in result.steps] == [
        (1, "a"),
        (1, "b"),
        (1, "c"),
        (2, "a"),
        (2, "b"),
    ]
    assert result.passes == 2 and result.converged
    assert len(timer.prepared) == 5 * len(SPLIT)
    assert all(handle.closed for handle in timer.handles)


def test_a_change_later_in_the_chain_makes_earlier_ops_choose_again():
    table = {("x", "x"): 3.0, ("x", "y"): 2.0, ("y", "x"): 4.0, ("y", "y"): 1.0}
    timer = CostTimer(lambda trial: table[trial.tactics])
    [result] = tune([(bucket(4), slots(op("a", "xy"), op("b", "xy")))], timer, settings())
    # pass 1: a keeps x (b=x), b moves to y; pass 2: a moves to y (b=y), b is timed again and
    # keeps y; pass 3 has nothing left to time: converged.
    assert [(s.pass_number, s.coordinate, s.chosen) for s in result.steps] == [
        (1, "a", "x"),
        (1, "b", "y"),
        (2, "a", "y"),
        (2, "b", "y"),
    ]
    assert result.chosen == {"a": "y", "b": "y"} and result.converged and result.passes == 2
    assert dict(result.final_step("a").context) == {"b": "y"}


def test_not_converging_within_max_passes_is_recorded_and_logged(caplog):
    caplog.set_level(logging.WARNING, logger="fi_patches")
    [result] = tune(chain_plan(), CostTimer(additive(COSTS, AFTER)), settings(max_passes=1))
    assert not result.converged and result.passes == 1
    assert result.chosen["c"] == ("split", 4)  # the last choices are kept
    assert "still changed a choice in pass 1 of 1" in caplog.text


def stats(*medians):
    return [Stats(("t", i), (m, m, m)) for i, m in enumerate(medians)]


def test_choose_fastest_outside_the_tolerance():
    assert choose(stats(10.0, 9.0, 9.5), 0.01, None) == (("t", 1), (("t", 1),), FASTEST)


def test_choose_a_tie_goes_to_the_current_pin():
    chosen, tied, rule = choose(stats(10.0, 9.95, 9.0, 9.05), 0.01, ("t", 3))
    assert (chosen, rule) == (("t", 3), CURRENT_PIN)
    assert tied == (("t", 2), ("t", 3))


def test_choose_a_tie_without_the_pin_goes_to_enumerator_order():
    chosen, tied, rule = choose(stats(9.05, 10.0, 9.0), 0.01, ("t", 1))
    assert (chosen, tied, rule) == (("t", 0), (("t", 0), ("t", 2)), ENUMERATOR_ORDER)


def test_zero_tolerance_only_ties_equal_medians():
    assert choose(stats(9.0001, 9.0), 0.0, ("t", 0))[0] == ("t", 1)
    assert choose(stats(9.0, 9.0), 0.0, ("t", 1))[0] == ("t", 1)


def test_ties_are_recorded_and_deterministic_across_runs():
    costs = {"a": {"x": 10.0, "y": 10.02, "z": 12.0}, "b": {"x": 5.0, "y": 5.0, "z": 5.0}}
    runs = []
    for seed in range(3):
        ops = [op("a", ("x", "y", "z")), op("b", ("x", "y", "z"))]
        timer = CostTimer(additive(costs), noise=0.0005, seed=seed)
        [result] = tune([(bucket(8), slots(*ops, pins={"a": "y"}))], timer, settings())
        runs.append(result.chosen)
        assert set(result.ties()) == {"a", "b"}
        assert result.final_step("a").rule == CURRENT_PIN
        assert result.final_step("b").rule == ENUMERATOR_ORDER
    assert runs == [{"a": "y", "b": "x"}] * 3


def test_the_current_pin_is_where_descent_starts():
    costs = {"a": {"x": 1.0, "y": 1.0}}
    timer = CostTimer(additive(costs))
    [result] = tune([(bucket(1), slots(op("a", ("x", "y")), pins={"a": "y"}))], timer, settings())
    assert result.pins == {"a": "y"} and result.chosen == {"a": "y"}
    # a pin the runner does not offer is ignored (recorded as None)
    [result] = tune(
        [(bucket(1), slots(op("a", ("x", "y")), pins={"a": "q"}))],
        CostTimer(additive(costs)),
        settings(),
    )
    assert result.pins == {"a": None} and result.chosen == {"a": "x"}


def test_samples_are_interleaved_and_each_round_starts_one_later():
    timer = CostTimer(additive({"a": {"x": 1.0, "y": 2.0, "z": 3.0}}))
    tune([(bucket(1), slots(op("a", ("x", "y", "z"))))], timer, settings(repeats=3))
    order = [trial.tactics[0] for trial in timer.sampled]
    assert order == ["x", "y", "z", "y", "z", "x", "z", "x", "y"]


def test_provenance_holds_medians_spreads_and_every_candidate():
    values = {"x": iter([10.0, 11.0, 20.0]), "y": iter([12.0, 20.0, 26.0])}

    def cost(trial):
        return next(values[trial.tactics[0]])

    [result] = tune([(bucket(1), slots(op("a", ("x", "y"))))], CostTimer(cost), settings(repeats=3))
    step = result.final_step("a")
    x, y = step.candidates
    assert x.samples == (10.0, 11.0, 20.0) and y.samples == (12.0, 20.0, 26.0)
    assert x.median == 11.0 and x.spread == pytest.approx(10.0 / 11.0)
    data = result.to_json()
    assert data["chosen"] == {"a": "x"} and data["ties"] == []
    assert data["steps"][0]["candidates"][1] == {
        "tactic": "y",
        "median_us": 20.0,
        "min_us": 12.0,
        "max_us": 26.0,
        "spread": 0.7,
        "samples": 3,
    }


def test_ops_of_one_coordinate_share_a_tactic():
    ops = [op("q", ("x", "y")), op("k", ("x", "y")), op("o", ("x", "y"))]
    costs = {"q": {"x": 2.0, "y": 1.0}, "k": {"x": 1.0, "y": 1.2}, "o": {"x": 1.0, "y": 2.0}}
    timer = CostTimer(additive(costs))
    [result] = tune([(bucket(8), slots(*ops, keys=("qk", "qk", "o")))], timer, settings())
    assert result.chosen == {"qk": "y", "o": "x"}
    assert all(t.tactics[0] == t.tactics[1] for t in timer.prepared)


def test_candidates_are_offered_at_both_ends_and_limited_with_the_pin_kept():
    runner_op = op("a", ("p", "q", "r", "s"), by_rows={5: ("p", "r", "s"), 8: ("q", "p", "r", "s")})
    [slot] = slots(runner_op, pins={"a": "s"})
    b = bucket(5, 8)
    assert candidates_for(b, [slot], 0) == ["q", "p", "r", "s"][1:]  # q is not offered at 5 rows
    assert candidates_for(b, [slot], 1) == ["p", "s"]


def test_an_op_without_tactics_or_failing_to_list_them_is_a_tune_error():
    with pytest.raises(TuneError, match="offer no tactic for rows 1"):
        tune([(bucket(1), slots(op("a", ())))], CostTimer(lambda t: 1.0), settings())

    class Broken:
        def get_valid_tactics(self, inputs, profile):
            raise RuntimeError("no device")

    from fi_patches.chain.ops import RunnerOp
    from fi_patches.chain.select import Slot

    broken = Slot("a", "a", RunnerOp("a", Broken(), lambda rows: None))
    with pytest.raises(TuneError, match=r"could not list its tactics at 1 rows \(RuntimeError"):
        tune([(bucket(1), [broken])], CostTimer(lambda t: 1.0), settings())


def test_progress_counts_every_sample_and_grows_for_later_passes():
    seen = []
    tune(
        chain_plan(),
        CostTimer(additive(COSTS, AFTER)),
        settings(repeats=2),
        progress=lambda advance, total, label: seen.append((advance, total, label)),
    )
    assert sum(a for a, _, _ in seen) == 5 * len(SPLIT) * 2
    assert seen[0][1] == 3 * len(SPLIT) * 2 and seen[-1][1] == 5 * len(SPLIT) * 2
    assert seen[0][2] == "rows 8, a"


def test_the_cuda_graph_timer_needs_a_cuda_device():
    import torch

    from fi_patches.chain.timing import CudaGraphTimer

    if torch.cuda.is_available():
        pytest.skip("checks the refusal where torch sees no CUDA device")
    with pytest.raises(TuneError, match="timing a chain needs a CUDA device; torch sees none"):
        CudaGraphTimer()
