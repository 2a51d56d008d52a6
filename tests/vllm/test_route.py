"""vLLM's real ``FlashInferCutedslMxfp8LinearKernel`` with fi_patches' route: each GEMM reaches
the route ``fi_patches.mxfp8.explain()`` names, up to the launch (CPU, simulated sm_103), then
vLLM's own GEMM when it fails; without the route vLLM's GEMM runs unchanged."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (`nox -s vllm` runs these tests)")

import torch

from fi_patches import refresh
from fi_patches.mxfp8 import Route, explain
from tests.vllm import layers
from tests.vllm.calls import recording

N, K = layers.N, layers.K
CUDA = r"(?i)cuda"  # what FlashInfer raises on a CPU
QUANTIZE = "vllm mxfp8_e4m3_quantize"
STOCK = [
    "vllm mm_mxfp8(backend='cute-dsl')",
    "mm_mxfp8(backend='cute-dsl')",
    "CuteDSLMxfp8GemmRunner.forward(tactic=-1)",
]
ROUTES = {4: Route.LOW_LATENCY, 20: Route.WIDE, 100: Route.PINNED_CUTE_DSL}


def reached(choice) -> list[str]:
    """What the route ``choice`` enters, up to its launch."""
    if choice.route is Route.LOW_LATENCY:
        return [
            "mm_mxfp8(backend='cutedsl_low_latency')",
            "CutedslLowLatencyBlockscaledGemmRunner.forward(tactic=-1)",
        ]
    if choice.route is Route.WIDE:
        return [f"launch_wide(tile={choice.tile}, tactic={tuple(choice.tactic)})"]
    assert choice.route is Route.PINNED_CUTE_DSL
    return ["pinned_mm", f"CuteDSLMxfp8GemmRunner.forward(tactic={choice.tactic!r})"]


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.simulated
@pytest.mark.parametrize("rows", sorted(ROUTES))
def test_routing_reaches_the_route_explain_names(table, routed, rows, caplog):
    choice = explain(N, K, rows)
    assert choice.route is ROUTES[rows], choice.reason
    with recording() as seen, pytest.raises(Exception, match=CUDA):
        routed.apply(torch.zeros(2, rows // 2, K, dtype=torch.bfloat16))
    seen = [s for s in seen if not s.startswith("compile_wide")]  # compiled once, then cached
    route = reached(choice)
    assert seen == [QUANTIZE, *route, *STOCK]  # the CPU launch fails: vLLM's GEMM answers
    assert len(warnings(caplog)) == 1
    assert f"rows={rows} failed" in warnings(caplog)[0]
    assert "vLLM's own mm_mxfp8(backend='cute-dsl') serves this problem" in warnings(caplog)[0]


@pytest.mark.simulated
def test_a_failed_problem_goes_to_vllms_gemm_from_then_on(table, routed, caplog):
    x = torch.zeros(4, K, dtype=torch.bfloat16)
    for _ in range(2):
        with recording() as seen, pytest.raises(Exception, match=CUDA):
            routed.apply(x)
    assert seen == [QUANTIZE, *STOCK]
    assert len(warnings(caplog)) == 1


@pytest.mark.simulated
def test_a_quantized_activation_is_used_as_it_comes(table, routed):
    qa = layers.quantized_activation(4)
    with recording() as seen, pytest.raises(Exception, match=CUDA):
        routed.apply(qa)
    assert seen[:2] == reached(explain(N, K, 4))  # no second quantization


@pytest.mark.simulated
def test_without_the_route_vllm_runs_its_own_gemm(table, monkeypatch, original):
    linear = layers.linear(monkeypatch)
    assert vars(layers.kernel_class())["apply_weights"] is original
    for rows in sorted(ROUTES):
        with recording() as seen, pytest.raises(Exception, match=CUDA):
            linear.apply(torch.zeros(rows, K, dtype=torch.bfloat16))
        assert seen == [QUANTIZE, *STOCK]


def test_a_disabled_route_leaves_the_gemm_to_vllm(routed, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="fi_patches")
    monkeypatch.setenv("FI_PATCHES_DEVICE", "sm_90")
    refresh()
    for _ in range(2):
        with recording() as seen, pytest.raises(Exception):  # noqa: B017 - CPU: no device
            routed.apply(torch.zeros(4, K, dtype=torch.bfloat16))
        assert [s for s in seen if s != QUANTIZE][:1] == STOCK[:1]
    lines = [r.getMessage() for r in caplog.records if "keep vLLM's own GEMM" in r.getMessage()]
    assert lines == [
        "vLLM's cute-dsl MXFP8 linears keep vLLM's own GEMM: needs sm_100 or sm_103; "
        "this device is sm_90."
    ]


def test_disable_removes_the_route_and_arm_installs_it_again(original):
    import fi_patches
    from fi_patches.vllm import route

    cls = layers.kernel_class()
    assert route.arm().startswith("routing ")
    assert vars(cls)["apply_weights"] is not original
    assert vars(cls)["apply_weights"].__wrapped__ is original
    fi_patches.disable()
    assert vars(cls)["apply_weights"] is original
    assert route.arm().startswith("routing ")
    route.remove()
    assert vars(cls)["apply_weights"] is original


# --- torch.compile: vLLM compiles its models ---------------------------------------------------


def traced(linear: layers.Linear, x, bias) -> tuple[list[tuple[str, str]], dict]:
    """The graph torch.compile(fullgraph=True) captures of ``apply_weights``: its inputs (a
    set: their order follows first use) and other nodes as (op, target), what the GEMM node
    takes and what the output is."""
    import torch._dynamo

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda x, bias: linear.apply(x, bias), backend=backend, fullgraph=True)
    with pytest.raises(Exception, match=CUDA):  # the graph runs; its GEMM fails on CPU
        compiled(x, bias)
    torch._dynamo.reset()
    (gm,) = graphs
    nodes, facts = [], {}
    for node in gm.graph.nodes:
        target = str(node.target)
        if target in ("vllm.mm_mxfp8", "fi_patches.vllm_mxfp8_mm"):
            facts["gemm"] = target
            facts["operands"] = [
                (tuple(a.meta["example_value"].shape), a.meta["example_value"].dtype)
                for a in node.args[:4]
            ]
            facts["out_dtype"] = node.kwargs.get("out_dtype", node.args[4:5] or None)
            target = "GEMM"
        if node.op == "output":
            out = node.args[0][0].meta["example_value"]
            facts["output"] = (tuple(out.shape), out.dtype, out.stride())
        nodes.append((node.op, target))
    inputs = sorted(n for n in nodes if n[0] == "placeholder")
    return inputs + [n for n in nodes if n[0] != "placeholder"], facts


@pytest.mark.parametrize(("shape", "with_bias"), [((2, 3, K), True), ((5, K), False)])
def test_compiled_route_differs_from_vllm_only_in_its_gemm(monkeypatch, original, shape, with_bias):
    from fi_patches.vllm import route

    linear = layers.linear(monkeypatch)
    x = torch.zeros(shape, dtype=torch.bfloat16)
    bias = torch.zeros(N, dtype=torch.bfloat16) if with_bias else None
    stock_nodes, stock = traced(linear, x, bias)
    route.arm()
    try:
        routed_nodes, routed = traced(linear, x, bias)
    finally:
        route.remove()
    assert (stock["gemm"], routed["gemm"]) == ("vllm.mm_mxfp8", "fi_patches.vllm_mxfp8_mm")
    assert routed_nodes == stock_nodes  # same quantization, bias and view around the GEMM
    assert routed["operands"] == stock["operands"]
    assert routed["output"] == stock["output"]
    assert routed["output"][:2] == ((*shape[:-1], N), torch.bfloat16)
    assert stock["out_dtype"] == torch.bfloat16
    assert routed["out_dtype"] == [torch.bfloat16] or routed["out_dtype"] == (torch.bfloat16,)
