"""``fi_patches.mxfp8.mm``: route selection for every row count 1..256 and what each route
hands to its kernel, down to the launch (CPU, simulated sm_103)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fi_patches.compat import refresh
from fi_patches.mxfp8 import Route, explain, mm
from fi_patches.pins import PinTable
from fi_patches.wide.tactics import wide_tactics
from tests import cutedsl
from tests.conftest import require_feature
from tests.mxfp8_inputs import Mxfp8Problem
from tests.wide_helpers import blackwell_or_skip, mxfp8_operand

N, K = 7168, 1536


@pytest.fixture
def routes(simulated):
    refresh()
    for name in ("pinned_tactics", "pinned_cute_dsl", "wide_tile"):
        require_feature(name)
    return simulated


def cute_pins() -> list[Any]:
    """The [[cute_dsl]] tactics the ``table`` fixture writes: for rows 33..64, then 65..128."""
    return [t for t in cutedsl.stock(N, K, 128)[2:] if t[4] == 1][:2]


@pytest.fixture
def table(routes) -> PinTable:
    cute = cute_pins()
    return PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
            "wide": [
                {"n": N, "k": K, "tile": t, "tactic": list(wide_tactics(N, K, t)[1])}
                for t in (16, 32, 48)
            ],
            "cute_dsl": [
                cutedsl.entry(N, K, 33, 64, cute[0]),
                cutedsl.entry(N, K, 65, 128, cute[1]),
            ],
        }
    )


@pytest.mark.simulated
def test_every_row_count_takes_the_expected_route(table):
    seen = {}
    for rows in range(1, 257):
        choice = explain(N, K, rows, pins=table)
        seen.setdefault(choice.route, []).append(rows)
        assert choice.reason
    assert seen[Route.LOW_LATENCY] == list(range(1, 9))
    assert seen[Route.WIDE] == list(range(9, 49))
    assert seen[Route.PINNED_CUTE_DSL] == list(range(49, 129))
    assert seen[Route.STOCK] == list(range(129, 257))
    assert (
        "no [[cute_dsl]] pin covers n=7168 k=1536 rows=200" in explain(N, K, 200, pins=table).reason
    )
    assert explain(N, K, 20, pins=table).tile == 32
    assert explain(N, K, 20, pins=table) is explain(N, K, 20, pins=table)  # chosen once, cached


@pytest.mark.simulated
def test_without_pins_everything_above_8_rows_is_stock(routes):
    empty = PinTable.empty()
    assert explain(N, K, 8, pins=empty).route is Route.LOW_LATENCY
    assert {explain(N, K, rows, pins=empty).route for rows in range(9, 257, 7)} == {Route.STOCK}


@pytest.mark.simulated
def test_disabled_features_route_to_stock(table, monkeypatch):
    monkeypatch.setenv("FI_PATCHES_DEVICE", "sm_90")
    refresh()
    for rows in (4, 16, 100):
        choice = explain(N, K, rows, pins=table)
        assert choice.route is Route.STOCK
    assert "this device is sm_90" in explain(N, K, 4, pins=table).reason


def _recorded_runner_calls(monkeypatch) -> list:
    """``(runner class name, tactic)`` of every FlashInfer runner called from now on."""
    from flashinfer.autotuner import TunableRunner

    calls = []
    original_call = TunableRunner.__call__

    def call(self, inputs, **kwargs):
        calls.append((type(self).__name__, cutedsl.nested_tuple(kwargs.get("tactic"))))
        return original_call(self, inputs, **kwargs)

    monkeypatch.setattr(TunableRunner, "__call__", call)
    return calls


@pytest.mark.simulated
def test_mm_hands_each_route_its_pinned_tactic(table, monkeypatch):
    import fi_patches.wide.launch as wide_launch

    calls = _recorded_runner_calls(monkeypatch)
    launched = []
    original_launch = wide_launch.LaunchPlan.run_column_major

    def launch(plan, *args, **kwargs):
        launched.append((plan.kernel.tile, tuple(plan.kernel.tactic)))
        return original_launch(plan, *args, **kwargs)

    monkeypatch.setattr(wide_launch.LaunchPlan, "run_column_major", launch)
    for rows in (4, 20, 100):
        t = Mxfp8Problem(N, K, rows).tensors()
        with pytest.raises(Exception, match="CUDA"):
            mm(t["a"], t["b"], t["b_scale"], x_scale=t["a_scale"], pins=table)
    assert calls[0] == (
        "CutedslLowLatencyBlockscaledGemmRunner",
        -1,
    )  # untuned: FlashInfer's default
    assert launched == [(32, tuple(wide_tactics(N, K, 32)[1]))]
    assert calls[1] == (cutedsl.CLASS, cute_pins()[1])  # the table's entry for 65..128 rows


@pytest.mark.simulated
def test_a_mapping_given_as_pins_routes_as_its_table(table, monkeypatch):
    """``pins=`` a mapping (``TableLike``): ``mm`` routes by the table it validates to, call
    after call (its memo row is keyed by the mapping's content)."""
    calls = _recorded_runner_calls(monkeypatch)
    mapping = table.to_mapping()
    t = Mxfp8Problem(N, K, 100).tensors()
    for _ in range(2):
        with pytest.raises(Exception, match="CUDA"):
            mm(t["a"], t["b"], t["b_scale"], x_scale=t["a_scale"], pins=mapping)
    pinned = cute_pins()[1]  # what the table (and so the mapping) pins for 65..128 rows
    assert calls == [(cutedsl.CLASS, pinned)] * 2
    assert explain(N, K, 100, pins=mapping).tactic == pinned


@pytest.mark.simulated
def test_bf16_input_is_quantized_by_flashinfer(table, monkeypatch):
    import flashinfer

    quantized = []
    original = flashinfer.mxfp8_quantize

    def spy(x, *args, **kwargs):
        quantized.append((tuple(x.shape), kwargs.get("is_sf_swizzled_layout")))
        return original(x, *args, **kwargs)

    monkeypatch.setattr(flashinfer, "mxfp8_quantize", spy)
    x = torch.zeros(2, 3, K, dtype=torch.bfloat16)
    t = Mxfp8Problem(N, K, 6).tensors()
    with pytest.raises(Exception):  # noqa: B017 - the quantize or the launch fails on CPU
        mm(x, t["b"], t["b_scale"], pins=table)
    assert quantized == [((6, K), True)]


@pytest.mark.gpu
def test_mm_matches_a_float32_reference_on_blackwell():
    torch_ = blackwell_or_skip()
    from fi_patches.cute_dsl import cute_dsl_runner
    from fi_patches.pins.keys import as_tactic as nested_tuple

    refresh()
    n, k = 1024, 1536
    device = torch_.device("cuda")
    w, w_scale, w_ref = mxfp8_operand(torch_, n, k, seed=7)
    runner = cute_dsl_runner(*torch_.cuda.get_device_capability(), torch_.bfloat16)
    cute = [
        nested_tuple(t)
        for t in runner.get_valid_tactics(Mxfp8Problem(n, k, 128).runner_inputs(), None)
    ]
    pins = PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": ""},
            "wide": [
                {"n": n, "k": k, "tile": t, "tactic": list(wide_tactics(n, k, t)[0])}
                for t in (16, 32, 48)
            ],
            "cute_dsl": [cutedsl.entry(n, k, 65, 128, next(t for t in cute if t[4] == 1))],
        }
    )
    for rows in range(1, 257):
        a, a_scale, a_ref = mxfp8_operand(torch_, rows, k, seed=rows)
        out = torch_.full((rows, n), float("nan"), dtype=torch_.bfloat16, device=device)
        got = mm(
            a.to(device),
            w.to(device).t(),
            w_scale.to(device),
            x_scale=a_scale.to(device),
            pins=pins,
            out=out,
        )
        torch_.cuda.synchronize()
        got = got.cpu().to(torch_.float64)
        assert not torch_.isnan(got).any(), f"rows={rows}: poisoned outputs left"
        ref = (a_ref @ w_ref.T).to(torch_.bfloat16).to(torch_.float64)
        torch_.testing.assert_close(
            got, ref, rtol=1e-2, atol=1e-3 * float(ref.abs().max()), msg=f"rows={rows}"
        )


@pytest.mark.simulated
def test_pins_turned_off_by_the_rank_guard_route_every_call_stock(table):
    import fi_patches
    from fi_patches.pinning import stack
    from fi_patches.pins import register_pins
    from fi_patches.ranks.guard import disable_pins

    def routes() -> list[Route]:
        with fi_patches.pinned_tactics(table):
            in_block = explain(N, K, 20).route
        return [explain(N, K, 20, pins=table).route, in_block, explain(N, K, 100).route]

    register_pins(table)  # the default table, as FI_PATCHES_PINS would be
    try:
        assert routes() == [Route.WIDE, Route.WIDE, Route.PINNED_CUTE_DSL]
        with fi_patches.pinned_tactics(table):
            assert explain(N, K, 20).route is Route.WIDE  # cached inside an open block
            disable_pins("ranks disagree")  # what rank_guard(on_mismatch="disable") does
            assert explain(N, K, 20).route is Route.STOCK
        # Explicit, block and default pins alike, cached routes included.
        assert routes() == [Route.STOCK] * 3
        stack.resume()
        assert routes() == [Route.WIDE, Route.WIDE, Route.PINNED_CUTE_DSL]
    finally:
        stack.resume()
        register_pins(None)
