"""``wide_mm`` / ``launch_wide`` input handling on CPU: everything up to the launch itself
(which needs an sm_100/sm_103 GPU) runs with the real compiled kernel."""

from __future__ import annotations

from typing import Any

import pytest

from fi_patches.wide.kernel import compile_wide
from fi_patches.wide.launch import check_launch_inputs, standard_scale_elements
from fi_patches.wide.tactics import default_tactic
from tests.wide_helpers import low_latency_or_skip

N, K = 640, 1536


@pytest.fixture
def inputs(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    low_latency_or_skip()
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU path; a CUDA device is present")
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_103a")

    def make(rows: int) -> dict[str, Any]:
        return {
            "a": torch.zeros(rows, K, dtype=torch.float8_e4m3fn),
            "a_scale": torch.ones(standard_scale_elements(rows, K), dtype=torch.uint8),
            "weight": torch.zeros(N, K, dtype=torch.float8_e4m3fn),
            "weight_scale": torch.ones(standard_scale_elements(N, K), dtype=torch.uint8),
            "out": torch.empty(rows, N, dtype=torch.bfloat16),
        }

    return {"make": make, "torch": torch}


def test_wide_mm_reaches_the_launch(inputs: dict[str, Any]) -> None:
    from fi_patches.wide.launch import wide_mm

    t = inputs["make"](20)
    with pytest.raises(ValueError, match="CUDA tensors"):
        wide_mm(t["a"], t["a_scale"], t["weight"].t(), t["weight_scale"], out=t["out"])


def test_wide_mm_rejects_rows_over_an_explicit_tile(inputs: dict[str, Any]) -> None:
    from fi_patches.wide.launch import wide_mm

    t = inputs["make"](40)
    args = (t["a"], t["a_scale"], t["weight"].t(), t["weight_scale"])
    with pytest.raises(ValueError, match="repack_scales=True"):
        wide_mm(*args, tile=16)
    with pytest.raises(ValueError, match="CUDA tensors"):
        wide_mm(*args, tile=16, repack_scales=True)
    big = inputs["make"](49)
    with pytest.raises(ValueError, match="exceed the wide tile's range"):
        wide_mm(big["a"], big["a_scale"], t["weight"].t(), t["weight_scale"])


def test_wide_mm_wants_the_column_major_weight_view(inputs: dict[str, Any]) -> None:
    from fi_patches.wide.launch import wide_mm

    t = inputs["make"](20)
    weight_kn = t["weight"].t().contiguous()  # (K, N) row-major: not mm_mxfp8's layout
    with pytest.raises(ValueError, match="column-major view"):
        wide_mm(t["a"], t["a_scale"], weight_kn, t["weight_scale"])


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"a": "bf16"}, "a must be float8_e4m3fn"),
        ({"weight_scale": "short"}, "weight_scale needs"),
        ({"a_scale": "short"}, "a_scale needs"),
        ({"out": "fp16"}, "out must be bfloat16"),
        ({"weight": "noncontig"}, "row-major"),
    ],
)
def test_launch_checks_name_the_bad_input(
    inputs: dict[str, Any], change: dict[str, str], needle: str
) -> None:
    torch = inputs["torch"]
    t = inputs["make"](20)
    for name, how in change.items():
        if how == "bf16":
            t[name] = t[name].to(torch.bfloat16)
        elif how == "short":
            t[name] = t[name][:-1]
        elif how == "fp16":
            t[name] = t[name].to(torch.float16)
        elif how == "noncontig":
            t[name] = torch.zeros(K, N, dtype=torch.float8_e4m3fn).t()
    kernel = compile_wide(32, default_tactic(), arch="sm_103a")
    with pytest.raises(ValueError, match=needle):
        check_launch_inputs(kernel, t["weight"], t["weight_scale"], t["a"], t["a_scale"], t["out"])


def test_a_launch_plan_is_made_once_per_shape_and_checks_each_call(
    inputs: dict[str, Any],
) -> None:
    from fi_patches.wide.launch import launch_plan

    kernel = compile_wide(32, default_tactic(), arch="sm_103a")
    plan = launch_plan(kernel, N, 20, K)
    assert launch_plan(kernel, N, 20, K) is plan
    assert launch_plan(kernel, N, 21, K) is not plan
    t = inputs["make"](20)
    # The same checks with the weight as mm_mxfp8 takes it (the (K, N) view, no transpose).
    with pytest.raises(ValueError, match="CUDA tensors"):
        plan.run_column_major(t["weight"].t(), t["weight_scale"], t["a"], t["a_scale"], t["out"])
    with pytest.raises(ValueError, match="column-major"):
        plan.run_column_major(
            t["weight"].t().contiguous(), t["weight_scale"], t["a"], t["a_scale"], t["out"]
        )
    other = inputs["make"](21)  # the tensors of another shape than the plan's
    with pytest.raises(ValueError, match=r"a must be \(rows, K\) = \(20, 1536\)"):
        plan.run(t["weight"], t["weight_scale"], other["a"], other["a_scale"], t["out"])


def test_a_shape_the_kernel_cannot_run_has_no_plan(inputs: dict[str, Any]) -> None:
    from fi_patches.wide.kernel import WideConfigError
    from fi_patches.wide.launch import launch_plan

    kernel = compile_wide(16, default_tactic(), arch="sm_103a")
    with pytest.raises(WideConfigError, match="rows=20"):
        launch_plan(kernel, N, 20, K)  # 20 rows exceed tile 16 with standard scales
    assert (N, 20, K, False) not in kernel.plans
