"""Which runner serves which rows for an op of a chain, and the checks that every bucket is
served by one runner (and, for wide tiles, one tile) for every op."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fi_patches.pins.errors import PinProblem
from fi_patches.pins.schema import LOW_LATENCY_MAX_ROWS
from fi_patches.wide.tactics import WIDE_MAX_ROWS, WIDE_MIN_ROWS, pick_tile

if TYPE_CHECKING:
    from fi_patches.chain.spec import Bucket, OpSpec


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


def check_routes(
    ops: Sequence[OpSpec], buckets: Sequence[Bucket], source: str, problems: list[PinProblem]
) -> None:
    """Each op's runner serves every row of every bucket with one section (and, for wide
    tiles, one tile per bucket and a different tile for each bucket)."""
    for op in ops:
        tiles: dict[int, int] = {}
        for bucket in buckets:
            where = f"[[bucket]] #{bucket.index}"
            rows = range(bucket.min_rows, bucket.max_rows + 1)
            sections = {section_for(op.runner, r) for r in rows}
            if None in sections:
                served = [r for r in rows if section_for(op.runner, r) is not None]
                what = f"rows {served[0]}..{served[-1]} of it" if served else "none of its rows"
                problems.append(
                    PinProblem(
                        source,
                        where,
                        "max_rows",
                        bucket.max_rows,
                        f"op {op.name!r} (runner {op.runner}) serves {what}",
                    )
                )
                continue
            if len(sections) > 1:
                routes = " and ".join(sorted(str(s) for s in sections))
                problems.append(
                    PinProblem(
                        source,
                        where,
                        "max_rows",
                        bucket.max_rows,
                        f"rows {bucket.label} span the {routes}"
                        f" routes of op {op.name!r} (runner {op.runner}); split the "
                        f"bucket at {LOW_LATENCY_MAX_ROWS} and {WIDE_MAX_ROWS}",
                    )
                )
                continue
            if sections != {"wide"}:
                continue
            bucket_tiles = {pick_tile(r) for r in rows}
            if len(bucket_tiles) > 1:
                problems.append(
                    PinProblem(
                        source,
                        where,
                        "max_rows",
                        bucket.max_rows,
                        f"rows {bucket.label} need wide tiles {sorted(bucket_tiles)} for "
                        f"op {op.name!r}; a wide pin is per tile, so split the bucket",
                    )
                )
                continue
            tile = bucket_tiles.pop()
            if tile in tiles:
                problems.append(
                    PinProblem(
                        source,
                        where,
                        "min_rows",
                        bucket.min_rows,
                        f"rows {bucket.label} use wide tile {tile} like [[bucket]] "
                        f"#{tiles[tile]}; a wide pin is per tile, so merge them",
                    )
                )
            tiles.setdefault(tile, bucket.index)
