"""``mm``: one MXFP8 projection, on the route :mod:`fi_patches.mxfp8.routes` chose for it."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.mxfp8.routes import Choice, Route, choice_for
from fi_patches.pinning import stack
from fi_patches.pinning.index import Memo
from fi_patches.pinning.stack import TableLike, pins_key
from fi_patches.pins.default import GENERATION as _GENERATION
from fi_patches.pins.table import PinTable

_scope_of = stack._scope.get


def _wide_kernel(choice: Choice) -> Any:
    kernel = choice.state.get("kernel")
    if kernel is None:
        from fi_patches.wide.compile import compile_wide

        kernel = choice.state["kernel"] = compile_wide(choice.tile, choice.tactic)  # type: ignore[arg-type]
    return kernel


def _wide_plan(choice: Choice, n: int, rows: int, k: int) -> Any:
    """The wide route's launch plan for its shape (the kernel compiled on first use)."""
    from fi_patches.wide.launch import launch_plan

    plan = choice.state["plan"] = launch_plan(_wide_kernel(choice), n, rows, k)
    return plan


# An ``import`` statement per call costs as much as the route lookup (a ``from`` import of a
# submodule, several times it), so the hot path reads modules from sys.modules.
_modules: list[Any] = []
"""``[flashinfer, torch]`` once imported."""


def _flashinfer_and_torch() -> list[Any]:
    if not _modules:
        flashinfer = fi.package()
        import torch

        _modules[:] = [flashinfer, torch]
    return _modules


# Route members as module globals: reading one off the Enum class costs several times more.
_LOW_LATENCY, _WIDE, _PINNED_CUTE_DSL = Route.LOW_LATENCY, Route.WIDE, Route.PINNED_CUTE_DSL
_PINNED_MM = "fi_patches.cute_dsl.pinned_mm"


def _module(name: str) -> Any:
    """The module ``name`` (a route's), imported on its first use."""
    module = sys.modules.get(name)
    if module is None:
        module = importlib.import_module(name)
    return module


_STOCK = ""
"""The backend slot of a stock route: the caller's ``stock_backend``."""


def _route_of(
    shape: Any, weight_shape: Any, out_dtype: Any, pins: Any, memo: Memo
) -> tuple[Any, ...]:
    """Choose (:func:`choice_for`) and remember the route for these shapes under ``key``:
    ``(backend, choice, rows, n, flat, flashinfer)``, where ``backend`` is what ``mm_mxfp8``
    gets (``_STOCK``: the caller's) or None for the wide and pinned cute-dsl routes."""
    flashinfer, torch = _modules or _flashinfer_and_torch()
    k, n = shape[-1], weight_shape[1]
    rows = 1
    for dim in shape[:-1]:
        rows *= dim
    choice = choice_for(n, k, rows, out_dtype or torch.bfloat16, pins)
    route = choice.route
    backend = (
        route.value
        if route is _LOW_LATENCY
        else None
        if route in (_WIDE, _PINNED_CUTE_DSL)
        else _STOCK
    )
    found = (backend, choice, rows, n, len(shape) == 2, flashinfer)
    return memo.remember((shape, weight_shape, out_dtype, pins_key(pins)), found)  # type: ignore[no-any-return]


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
    shape = x.shape
    # The route for these shapes under the pins in force: one dict lookup in this scope's memo
    # (which the pin state's generation empties) on a key of the tensors' shapes as they come
    # (a 4-tuple, apart from the routers' string keys). Everything the call needs besides comes
    # with it: each object read costs on a path this short, the more so next to FlashInfer's.
    scope = _scope_of()
    memo = scope.rows if scope.rows_version == _GENERATION[0] else scope.memo()
    found = memo.get(
        (
            shape,
            weight.shape,
            out_dtype,
            pins if pins is None or pins.__class__ is PinTable else pins_key(pins),
        )
    )
    if found is None:
        found = _route_of(shape, weight.shape, out_dtype, pins, memo)
    backend, choice, rows, n, flat, flashinfer = found
    a = x if flat else x.reshape(-1, shape[-1])  # flat: the common case, no reshapes
    if x_scale is None:
        try:
            quantize = flashinfer.mxfp8_quantize
        except AttributeError:
            quantize = fi.mxfp8_quantize()  # InternalError naming what this release lacks
        a, x_scale = quantize(a, is_sf_swizzled_layout=True)
    if backend is not None:  # low-latency or stock: mm_mxfp8 itself
        # Looked up per call, so a consumer's own patch of mm_mxfp8 is honoured.
        try:
            mm_mxfp8 = flashinfer.mm_mxfp8
        except AttributeError:
            mm_mxfp8 = fi.mm_mxfp8()  # InternalError naming what this release lacks
        # out_dtype goes to mm_mxfp8 only when given: its default is BF16 too, and each keyword
        # passed costs FlashInfer's argument checks time on every call.
        if out_dtype is None:
            result = mm_mxfp8(
                a, weight, x_scale, weight_scale, out=out, backend=backend or stock_backend
            )
        else:
            result = mm_mxfp8(
                a,
                weight,
                x_scale,
                weight_scale,
                out=out,
                out_dtype=out_dtype,
                backend=backend or stock_backend,
            )
    elif choice.route is _WIDE:
        if out is None:
            torch = _modules[1]
            out = torch.empty(rows, n, dtype=out_dtype or torch.bfloat16, device=a.device)
        # The shape's plan was checked once; the weight goes in mm_mxfp8's (K, N) view as is.
        plan = choice.state.get("plan") or _wide_plan(choice, n, rows, shape[-1])
        result = plan.run_column_major(weight, weight_scale, a, x_scale, out)
    else:
        pinned = sys.modules.get(_PINNED_MM) or _module(_PINNED_MM)
        result = pinned.pinned_mm_with(
            a, x_scale, weight, weight_scale, out_dtype, out, choice.tables
        )
    return result if flat else result.view(*shape[:-1], n)
