"""The MXFP8 projection entry point: ``mm`` routes each GEMM to the low-latency backend, the
wide kernel, a pinned cute-dsl tactic or stock ``mm_mxfp8``; ``explain`` says which and why.

Which route serves an MXFP8 projection of ``rows`` rows and an ``(n, k)`` weight, and why.
Chosen once per problem and pin tables, then cached: the hot path is a dict lookup.

* rows <= 8: FlashInfer's ``cutedsl_low_latency`` backend (its tuner pinned by
  ``[[low_latency]]`` pins inside ``pinned_tactics()``);
* 9 .. the wide maximum (48): the wide-tile kernel, where a ``[[wide]]`` pin covers the tile;
* above, or without a wide pin: the cute-dsl runner, where a ``[[cute_dsl]]`` pin covers the rows;
* otherwise, or with the feature off: stock ``mm_mxfp8``.

``mm`` runs one MXFP8 projection on the route :func:`choice_for` chose for it.
"""

from __future__ import annotations

import enum
import importlib
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from fi_patches.compat.features import status_of
from fi_patches.internals import flashinfer as fi
from fi_patches.pinning import stack
from fi_patches.pinning.index import Memo
from fi_patches.pinning.stack import TableLike, pins_key, tables_in_force
from fi_patches.pins.schema import LOW_LATENCY_MAX_ROWS, WIDE_MAX_ROWS
from fi_patches.pins.table import GENERATION as _GENERATION
from fi_patches.pins.table import PinTable, lookup, lookup_wide


class Route(enum.Enum):
    LOW_LATENCY = "cutedsl_low_latency"
    WIDE = "wide"
    PINNED_CUTE_DSL = "pinned_cute_dsl"
    STOCK = "stock"


@dataclass
class Choice:
    """A route, the reason for it, and what it runs (the wide tile and tactic, or the pin)."""

    route: Route
    reason: str
    tile: int | None = None
    tactic: Any = None
    tables: tuple[Any, ...] = ()
    state: dict[str, Any] = field(default_factory=dict, repr=False)
    """Per-route objects made on first use (the compiled wide kernel)."""


_lock = threading.Lock()
_scope_of = stack.scope
_CHOICES = "mxfp8.routes"
"""The key, in a scope's memo (:meth:`fi_patches.pinning.stack._Scope.memo`), of the routes
chosen in that scope: they go with the scope, and are chosen again when the pin state's
generation moves on, so entering blocks does not grow them."""


def _low_latency(n: int, k: int, rows: int, out_dtype: Any) -> Choice | None:
    record = status_of("pinned_tactics")
    few = f"rows <= {LOW_LATENCY_MAX_ROWS}"
    if not record.enabled:
        return Choice(
            Route.STOCK, f"{few} but the low-latency backend is off here: {record.reason}"
        )
    if k % 128:
        return Choice(
            Route.STOCK, f"{few} but K={k} is not a multiple of 128 (low-latency needs it)"
        )
    return Choice(Route.LOW_LATENCY, f"{few}: FlashInfer's cutedsl_low_latency backend")


def _wide(
    n: int, k: int, rows: int, out_dtype: Any, tables: tuple[Any, ...], max_rows: int
) -> tuple[Choice | None, str]:
    import torch

    if rows > max_rows:
        return None, f"rows > {max_rows} (the wide maximum)"
    record = status_of("wide_tile")
    if not record.enabled:
        return None, f"wide_tile is off: {record.reason}"
    if out_dtype != torch.bfloat16:
        return None, "the wide kernel writes BF16 only"
    from fi_patches.wide.budget import invalid_reason
    from fi_patches.wide.tactics import pick_tile

    tile = pick_tile(rows, max_rows=max_rows)
    entry = lookup_wide(tables, n, k, tile)
    if entry is None:
        return None, f"no [[wide]] pin for n={n} k={k} tile={tile}"
    reason = invalid_reason((n, rows, k, 1), tile, entry.tactic)
    if reason is not None:
        return None, f"[[wide]] #{entry.index} cannot run {rows} rows: {reason}"
    return (
        Choice(
            Route.WIDE, f"wide tile {tile} pinned by [[wide]] #{entry.index}", tile, entry.tactic
        ),
        "",
    )


def _cute_dsl(
    n: int, k: int, rows: int, out_dtype: Any, tables: tuple[Any, ...]
) -> tuple[Choice | None, str]:
    record = status_of("pinned_cute_dsl")
    if not record.enabled:
        return None, f"pinned_cute_dsl is off: {record.reason}"
    entry = lookup(tables, "cute_dsl", n, k, rows)
    if entry is None:
        return None, f"no [[cute_dsl]] pin covers n={n} k={k} rows={rows}"
    from fi_patches.cute_dsl import plan_with
    from fi_patches.pinning.serving import mxfp8_runner_inputs

    planned = plan_with(n, k, rows, out_dtype, mxfp8_runner_inputs(n, k, rows, out_dtype), tables)
    if planned.tactic is None:
        return None, planned.reason
    return (
        Choice(
            Route.PINNED_CUTE_DSL,
            f"cute-dsl tactic pinned by [[cute_dsl]] #{entry.index}",
            None,
            entry.tactic,
        ),
        "",
    )


def wide_tiles_served(wide_max: int = WIDE_MAX_ROWS) -> dict[int, range]:
    """The tiles the wide route picks (as :func:`_wide` does), each with the rows it serves:
    a ``[[wide]]`` pin of another tile is never used by :func:`choice_for`."""
    from fi_patches.wide.tactics import pick_tile

    served: dict[int, list[int]] = {}
    for rows in range(LOW_LATENCY_MAX_ROWS + 1, wide_max + 1):
        served.setdefault(pick_tile(rows, max_rows=wide_max), []).append(rows)
    return {tile: range(rows[0], rows[-1] + 1) for tile, rows in sorted(served.items())}


def unreached_wide_tile(tile: int, wide_max: int = WIDE_MAX_ROWS) -> str | None:
    """Why no row count takes a ``[[wide]]`` pin of ``tile`` through the router, or None when
    some does."""
    served = wide_tiles_served(wide_max)
    if tile in served:
        return None
    tiles = ", ".join(f"{t} (rows {r.start}..{r.stop - 1})" for t, r in served.items())
    return (
        f"no route reaches tile {tile}: fi_patches.mxfp8.mm sends rows <= "
        f"{LOW_LATENCY_MAX_ROWS} to the low-latency backend and uses wide tiles {tiles}"
    )


def _choose(
    n: int, k: int, rows: int, out_dtype: Any, tables: tuple[Any, ...], wide_max: int
) -> Choice:
    if rows <= LOW_LATENCY_MAX_ROWS:
        choice = _low_latency(n, k, rows, out_dtype)
        assert choice is not None
        return choice
    wide, why_not_wide = _wide(n, k, rows, out_dtype, tables, wide_max)
    if wide is not None:
        return wide
    cute, why_not_cute = _cute_dsl(n, k, rows, out_dtype, tables)
    if cute is not None:
        cute.reason += f" (not wide: {why_not_wide})"
        return cute
    return Choice(
        Route.STOCK,
        f"stock mm_mxfp8: not wide ({why_not_wide}); not pinned cute-dsl ({why_not_cute})",
    )


def choice_for(
    n: int,
    k: int,
    rows: int,
    out_dtype: Any,
    pins: TableLike | None = None,
    wide_max: int = WIDE_MAX_ROWS,
) -> Choice:
    """The cached route of a problem under the pin tables in force (a hit costs one dict
    lookup; the memo changes whenever the tables in force may have)."""
    memo = _scope_of().memo()
    choices = memo.get(_CHOICES)
    if choices is None:
        choices = memo.remember(_CHOICES, Memo())
    key = (n, k, rows, out_dtype, wide_max, pins_key(pins))
    choice = choices.get(key)
    if choice is None:
        tables = tables_in_force(pins)
        with _lock:
            choice = choices.get(key)
            if choice is None:
                choice = _choose(n, k, rows, out_dtype, tables, wide_max)
                choice.tables = tables
                choices.remember(key, choice)
    return choice


def memo_size() -> int:
    """Routes remembered in this context's scope (for tests and benchmarks)."""
    memo = _scope_of().memo()
    return len(memo.get(_CHOICES, ())) + sum(isinstance(key, tuple) for key in memo)


def explain(
    n: int,
    k: int,
    rows: int,
    *,
    out_dtype: Any = None,
    pins: TableLike | None = None,
    wide_max: int = WIDE_MAX_ROWS,
) -> Choice:
    """The route ``mm`` takes for ``rows`` rows of an ``(n, k)`` weight, with the reason."""
    import torch

    return choice_for(n, k, rows, out_dtype or torch.bfloat16, pins, wide_max)


def _wide_kernel(choice: Choice) -> Any:
    kernel = choice.state.get("kernel")
    if kernel is None:
        from fi_patches.wide.kernel import compile_wide

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
_PINNED_MM = "fi_patches.cute_dsl"


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
