"""Every valid tactic of a wide tile for a weight shape, in the order FlashInfer's own
enumerator uses for the stock tile: its default first, then the nearest to it."""

from __future__ import annotations

import functools

from fi_patches.wide.dtypes import MXFP8, GemmDtypes
from fi_patches.wide.limits import MAX_AB_STAGES, SUPPORTED_SPLIT_K
from fi_patches.wide.tactic import Tactic
from fi_patches.wide.validity import invalid_reason

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
