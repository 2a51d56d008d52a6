"""Which wide tile serves a number of activation rows."""

from __future__ import annotations

from fi_patches.wide.limits import MAX_TILE, MIN_TILE, TILE_STEP

WIDE_MIN_ROWS = 9
"""Fewest rows the wide tile is meant for: up to 8, FlashInfer's stock tile serves."""

WIDE_MAX_ROWS = 48
"""Most rows the wide tile serves by default (tiles 16, 32, 48)."""

TILE_ROUNDING = 16
"""Rows are rounded up to a multiple of this to pick the tile (16 -> tiles 16, 32, 48)."""


def pick_tile(rows: int, *, rounding: int = TILE_ROUNDING, max_rows: int = WIDE_MAX_ROWS) -> int:
    """The tile for ``rows`` activation rows: ``rows`` rounded up to ``rounding``; ValueError
    when ``rows`` is above ``max_rows`` or the tile would be unsupported."""
    if rows < 1:
        raise ValueError(f"rows must be positive, got {rows}")
    if rounding < TILE_STEP or rounding % TILE_STEP:
        raise ValueError(f"rounding must be a multiple of {TILE_STEP}, got {rounding}")
    if rows > max_rows:
        raise ValueError(
            f"{rows} rows exceed the wide tile's range (at most {max_rows}); "
            "use flashinfer.mm_mxfp8 for larger batches"
        )
    tile = max(MIN_TILE, -(-rows // rounding) * rounding)
    if tile > MAX_TILE:
        raise ValueError(f"{rows} rows need a {tile}-row tile; the kernel supports {MAX_TILE}")
    return tile
