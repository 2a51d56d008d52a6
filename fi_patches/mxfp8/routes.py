"""Which route serves an MXFP8 projection of ``rows`` rows and an ``(n, k)`` weight, and why.
Chosen once per problem and pin tables, then cached: the hot path is a dict lookup.

* rows <= 8: FlashInfer's ``cutedsl_low_latency`` backend (its tuner pinned by
  ``[[low_latency]]`` pins inside ``pinned_tactics()``);
* 9 .. the wide maximum (48): the wide-tile kernel, where a ``[[wide]]`` pin covers the tile;
* above, or without a wide pin: the cute-dsl runner, where a ``[[cute_dsl]]`` pin covers the rows;
* otherwise, or with the feature off: stock ``mm_mxfp8``.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Any

from fi_patches._limits import LOW_LATENCY_MAX_ROWS, WIDE_MAX_ROWS
from fi_patches.compat.evaluate import status_of
from fi_patches.pinning import stack
from fi_patches.pinning.index import Memo
from fi_patches.pinning.stack import TableLike, pins_key, tables_in_force
from fi_patches.pins.table import lookup, lookup_wide


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
_scope_of = stack._scope.get
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
    from fi_patches.cute_dsl.pinned_mm import plan_with
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
