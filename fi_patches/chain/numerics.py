"""Run one pinned MXFP8 kernel on the GPU and compare its output with a float64 reference: the
check ``validate`` makes per pin, and the GPU tests' (``tests/test_wide_gpu.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fi_patches.chain.operands import mismatch, mxfp8_operand, reference_product
from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import as_tactic


def operands(torch: Any, n: int, k: int, rows: int) -> tuple[list[Any], Any, Any]:
    """``mm_mxfp8``'s seven runner inputs on the current CUDA device, with the output poisoned
    with NaN, plus ``(out, reference)``."""
    from fi_patches.cute_dsl import workspace

    device = torch.device("cuda", torch.cuda.current_device())
    a, a_scale, a_ref = mxfp8_operand(torch, rows, k, seed=rows)
    w, w_scale, w_ref = mxfp8_operand(torch, n, k, seed=1000 + n)
    out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device=device)
    inputs = [
        a.to(device),
        w.to(device).t(),
        a_scale.to(device),
        w_scale.to(device),
        torch.bfloat16,
        out,
        workspace(device),
    ]
    return inputs, out, reference_product(torch, a_ref, w_ref)


def low_latency_mismatch(n: int, k: int, rows: int, tactic: Sequence[int]) -> str | None:
    """FlashInfer's low-latency runner with ``tactic``, checked; None when it matches."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    inputs, out, ref = operands(torch, n, k, rows)
    fi.low_latency_runner(major * 10 + minor, True).forward(inputs, tactic=as_tactic(tactic))
    torch.cuda.synchronize()
    return mismatch(torch, out, ref)


def cute_dsl_mismatch(n: int, k: int, rows: int, tactic: Any) -> str | None:
    """FlashInfer's cute-dsl runner with ``tactic`` as pinned (never a silent substitute)."""
    import torch

    from fi_patches.cute_dsl import cute_dsl_runner, why_not_runnable

    major, minor = torch.cuda.get_device_capability()
    runner = cute_dsl_runner(major, minor, torch.bfloat16)
    inputs, out, ref = operands(torch, n, k, rows)
    reason = why_not_runnable(runner, inputs, tactic)
    if reason is not None:
        return f"does not run as pinned: {reason}"
    runner.forward(inputs, tactic=tactic)
    torch.cuda.synchronize()
    return mismatch(torch, out, ref)


def wide_mismatch(
    n: int,
    k: int,
    rows: int,
    *,
    tile: int | None = None,
    tactic: Sequence[int] | None = None,
    repack_scales: bool = False,
) -> str | None:
    """``wide_mm`` at ``rows`` rows (tile and tactic as it would choose them unless given)."""
    import torch

    from fi_patches.wide.launch import wide_mm

    inputs, out, ref = operands(torch, n, k, rows)
    a, b, a_scale, b_scale = inputs[0], inputs[1], inputs[2], inputs[3]
    result = wide_mm(
        a, a_scale, b, b_scale, out=out, tile=tile, tactic=tactic, repack_scales=repack_scales
    )
    torch.cuda.synchronize()
    if result is not out:
        return "wide_mm did not write the output it was given"
    return mismatch(torch, out, ref)
