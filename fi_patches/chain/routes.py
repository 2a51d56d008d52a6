"""Which runner serves which rows for an op of a chain (:mod:`fi_patches.chain.spec` checks
with it that every bucket is served by one runner, and for wide tiles one tile, for every op)."""

from __future__ import annotations

from fi_patches._limits import LOW_LATENCY_MAX_ROWS, WIDE_MAX_ROWS
from fi_patches.wide.tactics import WIDE_MIN_ROWS


def section_for(runner: str, rows: int) -> str | None:
    """The pin-table section serving ``rows`` rows for an op of ``runner``; None when that
    runner does not serve so many rows."""
    if runner == "mxfp8":
        if rows <= LOW_LATENCY_MAX_ROWS:
            return "low_latency"
        return "wide" if rows <= WIDE_MAX_ROWS else "cute_dsl"
    if runner == "low_latency":
        return runner if rows <= LOW_LATENCY_MAX_ROWS else None
    if runner == "wide":
        return runner if WIDE_MIN_ROWS <= rows <= WIDE_MAX_ROWS else None
    return runner
