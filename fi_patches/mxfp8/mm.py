"""``mm``: one MXFP8 projection, on the route :mod:`fi_patches.mxfp8.routes` chose for it."""

from __future__ import annotations

from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.mxfp8.routes import Choice, Route, choice_for
from fi_patches.pinning.resolve import TableLike


def _wide_kernel(choice: Choice) -> Any:
    kernel = choice.state.get("kernel")
    if kernel is None:
        from fi_patches.wide.compile import compile_wide

        kernel = choice.state["kernel"] = compile_wide(choice.tile, choice.tactic)  # type: ignore[arg-type]
    return kernel


def mm(
    x: Any,
    weight: Any,
    weight_scale: Any,
    *,
    x_scale: Any = None,
    out_dtype: Any = None,
    pins: TableLike | None = None,
    out: Any = None,
    stock_backend: str = "auto",
) -> Any:
    """``x @ weight`` for an MXFP8 projection.

    ``x`` is ``(..., K)``: BF16/FP16 (quantized with ``flashinfer.mxfp8_quantize``, swizzled
    scales) or E4M3 data with its 1-D swizzled scales in ``x_scale``. ``weight`` is what
    ``mm_mxfp8`` takes as ``b``, the ``(K, N)`` column-major view of an ``(N, K)`` E4M3 weight,
    with 1-D swizzled scales. Returns ``(..., N)`` in ``out_dtype`` (BF16 by default). The stock
    route calls ``mm_mxfp8`` with ``stock_backend``.
    """
    import torch

    out_dtype = out_dtype or torch.bfloat16
    flat = x.dim() == 2  # the common case: no reshapes on the hot path
    a2d = x if flat else x.reshape(-1, x.shape[-1])
    rows, k = a2d.shape
    n = weight.shape[1]
    choice = choice_for(n, k, rows, out_dtype, pins)
    if x_scale is None:
        a, a_scale = fi.mxfp8_quantize()(a2d, is_sf_swizzled_layout=True)
    else:
        a, a_scale = a2d, x_scale
    route = choice.route
    if route is Route.LOW_LATENCY:
        result = fi.mm_mxfp8()(
            a,
            weight,
            a_scale,
            weight_scale,
            out=out,
            out_dtype=out_dtype,
            backend="cutedsl_low_latency",
        )
    elif route is Route.WIDE:
        from fi_patches.wide.launch import launch_wide

        if out is None:
            out = torch.empty(rows, n, dtype=out_dtype, device=a.device)
        result = launch_wide(_wide_kernel(choice), weight.t(), weight_scale, a, a_scale, out)
    elif route is Route.PINNED_CUTE_DSL:
        from fi_patches.cute_dsl.pinned_mm import pinned_mm

        result = pinned_mm(
            a, a_scale, weight, weight_scale, out_dtype=out_dtype, out=out, pins=pins
        )
    else:
        result = fi.mm_mxfp8()(
            a, weight, a_scale, weight_scale, out=out, out_dtype=out_dtype, backend=stock_backend
        )
    return result if flat else result.view(*x.shape[:-1], n)
