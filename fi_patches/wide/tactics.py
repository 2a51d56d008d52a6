"""Which tile and tactic serve a wide problem: the tile for a row count, the tactic tuple, every
valid tactic for a problem (the tuner's candidates), the choice of one (a pin, else the first
valid), and why a ``[[wide]]`` pin can never run (pin-table validation)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import NamedTuple

from fi_patches._logging import get_logger, log_once
from fi_patches.pins.schema import WIDE_MAX_ROWS
from fi_patches.wide.budget import (
    MAX_AB_STAGES,
    MAX_TILE,
    MIN_TILE,
    MXFP8,
    SUPPORTED_SPLIT_K,
    TILE_STEP,
    GemmDtypes,
    invalid_reason,
)


class Tactic(NamedTuple):
    """``(cta_k, ab_stages, sfb_tmem_stages, split_k)``, as FlashInfer's ``autotune_tactics``
    lists them; equal to the plain tuple."""

    cta_k: int
    ab_stages: int
    sfb_tmem_stages: int
    split_k: int

    def __str__(self) -> str:
        return f"({self.cta_k}, {self.ab_stages}, {self.sfb_tmem_stages}, {self.split_k})"


def typed_tactic(value: Sequence[int]) -> Tactic:
    """``value`` as a :class:`Tactic`; ValueError unless it is four integers."""
    items = tuple(value)
    if len(items) != 4 or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ValueError(
            f"a tactic is four integers (cta_k, ab_stages, sfb_tmem_stages, split_k), got {value!r}"
        )
    return Tactic(*items)


WIDE_MIN_ROWS = 9
"""Fewest rows the wide tile is meant for: up to 8, FlashInfer's stock tile serves."""

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


DEFAULT_STAGES = 8
"""AB stages of FlashInfer's default tactic ``(4 * mma_k, 8, 1, 1)``."""


def default_tactic(dtypes: GemmDtypes = MXFP8) -> Tactic:
    """FlashInfer's default low-latency tactic: ``(4 * mma_k, 8, 1, 1)``."""
    return Tactic(4 * dtypes.mma_k, DEFAULT_STAGES, 1, 1)


def _rank(tactic: Tactic, default: Tactic) -> tuple[int, ...]:
    """Sort key: the default first, then by distance in cta_k, then in stages, then fewer
    split-K, then smaller cta_k and stages."""
    return (
        int(tactic != default),
        abs(tactic.cta_k - default.cta_k),
        abs(tactic.ab_stages - default.ab_stages),
        tactic.split_k,
        tactic.cta_k,
        tactic.ab_stages,
    )


def candidate_cta_k(k: int, dtypes: GemmDtypes = MXFP8) -> list[int]:
    """MMA-K multiples dividing ``k`` (the validity check prunes the rest)."""
    step = dtypes.mma_k
    return [c for c in range(step, k + 1, step) if k % c == 0]


def wide_tactics(
    n: int,
    k: int,
    tile: int,
    *,
    dtypes: GemmDtypes = MXFP8,
    arch: str | None = None,
) -> list[Tactic]:
    """Every valid tactic for the ``(n, k)`` weight at ``tile`` activation rows (SFB stages 1,
    as on FlashInfer's direct-SFB dispatch path), best-guess first (memoized: dispatch calls
    it per launch)."""
    return list(_wide_tactics(n, k, tile, dtypes, arch))


@functools.lru_cache(maxsize=1024)
def _wide_tactics(
    n: int, k: int, tile: int, dtypes: GemmDtypes, arch: str | None
) -> tuple[Tactic, ...]:
    problem = (n, tile, k, 1)
    found = [
        tactic
        for cta_k in candidate_cta_k(k, dtypes)
        for stages in range(1, MAX_AB_STAGES + 1)
        for split_k in SUPPORTED_SPLIT_K
        if invalid_reason(
            problem, tile, tactic := Tactic(cta_k, stages, 1, split_k), dtypes, arch=arch
        )
        is None
    ]
    default = default_tactic(dtypes)
    return tuple(sorted(found, key=lambda t: _rank(t, default)))


logger = get_logger(__name__)


def pinned_tactic(n: int, k: int, tile: int) -> Tactic | None:
    """The tactic a ``[[wide]]`` entry gives ``(n, k, tile)``: of the tables active here, else
    of the default table (``FI_PATCHES_PINS`` or ``register_pins``)."""
    from fi_patches.pinning.stack import wide_pin

    entry = wide_pin(n, k, tile)
    return None if entry is None else typed_tactic(entry.tactic)


def choose_tactic(
    n: int,
    k: int,
    tile: int,
    rows: int,
    tactic: Sequence[int] | None = None,
    *,
    dtypes: GemmDtypes = MXFP8,
    arch: str | None = None,
    sfb_per_cta_packed: bool = False,
) -> Tactic:
    """The tactic to run; ValueError naming the limit when an explicit one is invalid. An
    invalid pin is logged once and skipped."""
    problem = (n, rows, k, 1)
    if tactic is not None:
        chosen = typed_tactic(tactic)
        reason = invalid_reason(
            problem, tile, chosen, dtypes, arch=arch, sfb_per_cta_packed=sfb_per_cta_packed
        )
        if reason is not None:
            raise ValueError(f"tactic {chosen} cannot run N={n} K={k} at tile {tile}: {reason}")
        return chosen
    pin = pinned_tactic(n, k, tile)
    if pin is not None:
        reason = invalid_reason(
            problem, tile, pin, dtypes, arch=arch, sfb_per_cta_packed=sfb_per_cta_packed
        )
        if reason is None:
            return pin
        log_once(
            logger,
            logging.WARNING,
            f"bad-wide-pin:{n}:{k}:{tile}:{pin}",
            "ignoring [[wide]] pin %s for n=%d k=%d tile=%d: %s",
            pin,
            n,
            k,
            tile,
            reason,
        )
    tactics = wide_tactics(n, k, tile, dtypes=dtypes, arch=arch)
    if not tactics:
        raise ValueError(f"no valid wide tactic for N={n} K={k} at tile {tile}")
    return tactics[0]


def wide_pin_reason(
    n: int,
    k: int,
    tile: int,
    tactic: Sequence[int],
    *,
    dtypes: GemmDtypes = MXFP8,
    arch: str | None = None,
) -> str | None:
    """Why a ``[[wide]]`` pin ``(n, k, tile, tactic)`` can never run, or None. ``arch`` picks
    the shared-memory capacity (default sm_100's, equal to sm_103's)."""
    try:
        checked = typed_tactic(tactic)
    except ValueError as exc:
        return str(exc)
    if checked.sfb_tmem_stages != 1:
        return (
            f"sfb_tmem_stages must be 1 on the direct SFB path (FlashInfer's dispatch uses 1), "
            f"got {checked.sfb_tmem_stages}"
        )
    return invalid_reason((n, tile, k, 1), tile, checked, dtypes, arch=arch)
