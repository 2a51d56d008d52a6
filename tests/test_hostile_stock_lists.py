"""Validation sees FlashInfer's stock tactic lists, even inside an open ``pinned_tactics``
block: a nested table pinning the same rows to another valid tactic is accepted, in every
section, and ``pinned_mm`` plans a table against the stock list too."""

from __future__ import annotations

import pytest

import fi_patches
from fi_patches.compat import refresh
from fi_patches.pinning.validate import check_table
from fi_patches.pins import PinTable
from tests import cutedsl, lowlat
from tests.conftest import require_feature

N, K = 7168, 1536


@pytest.fixture
def cute(simulated):
    refresh()
    require_feature("pinned_cute_dsl")
    return simulated


def runnable(stock):
    """Tactics of the stock list that run as pinned at every row count (no split-K)."""
    return [t for t in stock[1:] if t[4] == 1]


def low_latency_table(tactic, source: str) -> PinTable:
    return PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
            "low_latency": [{"n": N, "k": K, "min_rows": 5, "max_rows": 8, "tactic": list(tactic)}],
        },
        source=source,
    )


@pytest.mark.simulated
def test_a_nested_cute_dsl_table_may_pin_the_same_rows_to_another_tactic(cute):
    stock = cutedsl.stock(N, K, 64)
    first, second = runnable(stock)[:2]
    outer = cutedsl.table(cutedsl.entry(N, K, 33, 64, first), source="outer")
    inner = cutedsl.table(cutedsl.entry(N, K, 33, 64, second), source="inner")
    with fi_patches.pinned_tactics(outer):
        assert cutedsl.stock(N, K, 64) == [first]  # the block narrows the live runner
        with fi_patches.pinned_tactics(inner) as active:
            assert active is not None
            assert cutedsl.stock(N, K, 64) == [second]
        assert cutedsl.stock(N, K, 64) == [first]
    assert cutedsl.stock(N, K, 64) == stock


@pytest.mark.simulated
def test_pinned_mm_plans_an_explicit_table_against_the_stock_list(cute):
    from fi_patches.cute_dsl import plan
    from tests.mxfp8_inputs import Mxfp8Problem

    first, second = runnable(cutedsl.stock(N, K, 64))[:2]
    outer = cutedsl.table(cutedsl.entry(N, K, 33, 64, first), source="outer")
    explicit = cutedsl.table(cutedsl.entry(N, K, 33, 64, second), source="explicit")
    inputs = Mxfp8Problem(N, K, 64).runner_inputs()
    with fi_patches.pinned_tactics(outer):
        chosen = plan(N, K, 64, inputs[4], inputs, explicit)
    assert chosen.tactic == second, chosen.reason


def test_a_nested_low_latency_table_may_pin_the_same_rows_to_another_tactic(pinning):
    runner = lowlat.runner()
    stock = lowlat.stock(N, K, 8)
    first, second = stock[1], stock[2]
    with fi_patches.pinned_tactics(low_latency_table(first, "outer")):
        assert lowlat.offered(runner, N, K, 8) == [first]
        with fi_patches.pinned_tactics(low_latency_table(second, "inner")):
            assert lowlat.offered(runner, N, K, 8) == [second]
        assert lowlat.offered(runner, N, K, 8) == [first]
    assert lowlat.offered(runner, N, K, 8) == stock


@pytest.mark.simulated
def test_validation_inside_a_block_checks_every_section_against_stock(both):
    """A table checked inside a block that pins the same problems, in [[low_latency]],
    [[cute_dsl]] and [[wide]] at once, is judged against the stock lists (FlashInfer's own,
    and the wide runner's outside any block): accepted, and then applied. ([[pin]] entries are
    checked by runner and op name only, against no list.)"""
    require_feature("wide_tile")
    from fi_patches.wide.launch import wide_runner
    from tests.mxfp8_inputs import Mxfp8Problem

    def wide_offered() -> list:  # a [[wide]] tactic is the runner's without its leading tile
        inputs = Mxfp8Problem(N, K, 32).runner_inputs()
        return [tuple(t[1:]) for t in wide_runner().get_valid_tactics(inputs, None)]

    low = lowlat.stock(N, K, 8)
    cute_stock = cutedsl.stock(N, K, 64)
    cute = runnable(cute_stock)
    wide = wide_offered()

    def table(i: int, source: str) -> PinTable:
        return PinTable.from_mapping(
            {
                "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
                "low_latency": [
                    {"n": N, "k": K, "min_rows": 5, "max_rows": 8, "tactic": list(low[1 + i])}
                ],
                "cute_dsl": [cutedsl.entry(N, K, 33, 64, cute[i])],
                "wide": [{"n": N, "k": K, "tile": 32, "tactic": list(wide[i])}],
            },
            source=source,
        )

    def seen() -> tuple:
        return lowlat.offered(lowlat.runner(), N, K, 8), cutedsl.stock(N, K, 64), wide_offered()

    outer, inner = table(0, "outer"), table(1, "inner")
    with fi_patches.pinned_tactics(outer):
        assert seen() == ([low[1]], [cute[0]], [wide[0]])  # every live list is narrowed
        assert check_table(inner) is inner  # ... yet the check sees the stock lists
        with fi_patches.pinned_tactics(inner):
            assert seen() == ([low[2]], [cute[1]], [wide[1]])
    assert seen() == (low, cute_stock, wide)


def test_an_error_raised_while_checking_is_a_problem_of_each_entry(pinning):
    from fi_patches.pinning.validate import _against_stock

    def broken(table: PinTable) -> list:
        raise ZeroDivisionError("enumerator bug")

    tactic = lowlat.stock(N, K, 8)[0]
    (problem,) = _against_stock("low_latency", broken)(low_latency_table(tactic, "pins.toml"))
    assert str(problem) == (
        f"pins.toml: [[low_latency]] #1: tactic = {list(tactic)}: could not be checked: "
        "FlashInfer's check raised ZeroDivisionError: enumerator bug"
    )


def test_probing_a_bucket_at_the_bounds_allocates_one_row():
    from fi_patches.pinning.serving import mxfp8_runner_inputs
    from fi_patches.pins.schema import K_MAX, N_MAX, ROWS_MAX

    a, b, *_, out, _ = mxfp8_runner_inputs(N_MAX, K_MAX, ROWS_MAX)
    assert tuple(a.shape) == (ROWS_MAX, K_MAX) and tuple(b.shape) == (K_MAX, N_MAX)
    assert tuple(out.shape) == (ROWS_MAX, N_MAX)
    # What validating such an entry holds in memory: one row of the activation (K_MAX bytes),
    # not ROWS_MAX x K_MAX (32 GiB), on the GPU of a serving host.
    assert a.untyped_storage().nbytes() == K_MAX
