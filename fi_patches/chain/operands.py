"""MXFP8 operands for launching and checking the pinned kernels: E4M3 values that are exact
quarter-integers, E8M0 scales in the swizzled 128x4 layout, and the float64 matrix they encode,
so a kernel's output can be checked against a float64 reference. Shared by ``tune`` (launch
inputs) and ``validate`` (numerics), and by the GPU tests."""

from __future__ import annotations

from typing import Any

from fi_patches.internals import flashinfer as fi

RTOL = 1e-2
"""Relative tolerance against the BF16-rounded float64 reference (the output is BF16)."""

ATOL_OF_MAX = 1e-3
"""Absolute tolerance as a fraction of the reference's largest magnitude."""


def mxfp8_operand(
    torch: Any, rows: int, k: int, seed: int, *, reference: bool = True
) -> tuple[Any, Any, Any]:
    """``(values, scales, dequantized)`` of a ``rows x k`` operand built on CPU: E4M3 values,
    their 1-D swizzled E8M0 scales, and the float64 matrix they encode (None unless
    ``reference``)."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randint(-12, 13, (rows, k), generator=gen).to(torch.float32) / 4
    quantized = values.to(torch.float8_e4m3fn)
    exponents = torch.randint(124, 131, (rows, k // 32, 1), generator=gen, dtype=torch.uint8)
    swizzled = fi.reorder_scale_factors()(exponents, rows, k, 32).reshape(-1).contiguous()
    if not reference:
        return quantized, swizzled, None
    scale = torch.exp2(exponents[:, :, 0].to(torch.float64) - 127).repeat_interleave(32, dim=1)
    return quantized, swizzled, quantized.to(torch.float64) * scale


def reference_product(torch: Any, a_ref: Any, w_ref: Any) -> Any:
    """``a @ w.T`` in float64, rounded to BF16 as the kernels' output is, back in float64."""
    return (a_ref @ w_ref.T).to(torch.bfloat16).to(torch.float64)


def mismatch(torch: Any, got: Any, ref: Any) -> str | None:
    """None when ``got`` (any dtype, on any device) matches ``ref`` within :data:`RTOL` and
    :data:`ATOL_OF_MAX`, else what is wrong: NaNs left in the output, or the worst error."""
    values = got.detach().cpu().to(torch.float64)
    if values.shape != ref.shape:
        return f"output shape {tuple(values.shape)} is not {tuple(ref.shape)}"
    if torch.isnan(values).any():
        return f"{int(torch.isnan(values).sum())} outputs are NaN (left unwritten)"
    atol = ATOL_OF_MAX * float(ref.abs().max())
    error = (values - ref).abs()
    allowed = atol + RTOL * ref.abs()
    bad = error > allowed
    if not bool(bad.any()):
        return None
    worst = int(torch.argmax(error - allowed))
    row, col = divmod(worst, ref.shape[1])
    return (
        f"{int(bad.sum())} of {ref.numel()} outputs differ; worst at ({row}, {col}): "
        f"{float(values[row, col]):.6g} vs reference {float(ref[row, col]):.6g}"
    )
