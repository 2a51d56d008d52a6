"""Whether the low-latency kernel can run a (problem, types, tile, tactic), and if not, why.

Every check of wide_tile.md §3.4 returns a sentence naming the limit it hit, so a rejected pin
or tactic says what to change. ``can_implement`` of the wide kernel class is ``reason is None``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fi_patches.wide.dtypes import MXFP8, GemmDtypes
from fi_patches.wide.limits import (
    CTA_M,
    EPILOGUE_THREADS,
    MAX_AB_STAGES,
    MAX_TILE,
    MIN_TILE,
    MX_CTA_K_MULTIPLE,
    SUPPORTED_SPLIT_K,
    TILE_STEP,
    TMEM_COLUMNS,
)
from fi_patches.wide.smem import arch_family, smem_bytes, smem_capacity
from fi_patches.wide.tmem import tmem_columns

DEFAULT_CAPACITY_ARCH = "sm_100"
"""Capacity checked when no arch is given: FlashInfer checks sm_100's (sm_103's is equal)."""


def tile_reason(tile: int, *, cta_m: int = CTA_M) -> str | None:
    """Why ``(cta_m, tile)`` is not a tile the kernel body supports, or None."""
    if cta_m != CTA_M:
        return f"cta_m must be {CTA_M}, got {cta_m}"
    if tile % TILE_STEP or not MIN_TILE <= tile <= MAX_TILE:
        return (
            f"tile must be a multiple of {TILE_STEP} in [{MIN_TILE}, {MAX_TILE}], got {tile} "
            f"(the MMA needs N % 8 == 0; one 128-row scale atom per tile caps it at {MAX_TILE})"
        )
    return None


def config_reason(
    tile: int,
    tactic: Sequence[int],
    dtypes: GemmDtypes = MXFP8,
    *,
    cta_m: int = CTA_M,
    sfb_tmem_store: bool = False,
    arch: str | None = None,
) -> str | None:
    """Why the kernel cannot be built for ``tile`` and ``tactic`` whatever the problem (types,
    tile, cta_k, stages, split-K, TMEM and shared memory), or None."""
    reason = dtypes.problem()
    if reason is not None:
        return reason
    if len(tactic) != 4:
        return f"a tactic is (cta_k, ab_stages, sfb_tmem_stages, split_k), got {tuple(tactic)}"
    cta_k, stages, sfb_stages, split_k = (int(v) for v in tactic)
    if sfb_tmem_store:
        if not dtypes.is_nvfp4:
            return "sfb_tmem_store (register-mediated SFB staging) is NVFP4-only"
        if tile != MIN_TILE:
            return (
                "sfb_tmem_store (register-mediated SFB staging) is not supported for wide "
                f"tiles (only the stock {MIN_TILE}-row tile); use the direct SFB path"
            )
    reason = tile_reason(tile, cta_m=cta_m)
    if reason is not None:
        return reason
    mma_k = dtypes.mma_k
    if cta_k <= 0 or cta_k % mma_k:
        return f"cta_k must be a positive multiple of the MMA K ({mma_k}), got {cta_k}"
    if dtypes.is_mx and cta_k % MX_CTA_K_MULTIPLE:
        return (
            f"cta_k must be a multiple of {MX_CTA_K_MULTIPLE} for MX scales (four 32-wide "
            f"MMA-K atoms per TMA box), got {cta_k}"
        )
    if not 1 <= stages <= MAX_AB_STAGES:
        return f"ab_stages must be in [1, {MAX_AB_STAGES}], got {stages}"
    if sfb_stages < 1:
        return f"sfb_tmem_stages must be at least 1, got {sfb_stages}"
    if split_k not in SUPPORTED_SPLIT_K:
        return f"split_k must be one of {SUPPORTED_SPLIT_K}, got {split_k}"
    per_thread = cta_m * tile // EPILOGUE_THREADS
    if per_thread % split_k:
        return (
            f"split_k {split_k} must divide the {per_thread} accumulator values per "
            "epilogue thread (the split-K mailbox shards)"
        )
    columns = tmem_columns(tile, cta_k, sfb_stages, dtypes, sfb_tmem_store=sfb_tmem_store)
    if columns > TMEM_COLUMNS:
        return (
            f"needs {columns} TMEM columns of {TMEM_COLUMNS} "
            f"(accumulator {tile} + scales {columns - tile} for cta_k {cta_k}, "
            f"{sfb_stages} SFB stage(s))"
        )
    family = arch_family(arch or DEFAULT_CAPACITY_ARCH)
    need = smem_bytes(tile, cta_k, stages, sfb_stages, split_k, dtypes, cta_m)
    capacity = smem_capacity(family)
    if need > capacity:
        return f"needs {need} B of shared memory; {family} allows {capacity} B"
    return None


def invalid_reason(
    problem_mnkl: Sequence[int],
    tile: int,
    tactic: Sequence[int],
    dtypes: GemmDtypes = MXFP8,
    *,
    cta_m: int = CTA_M,
    sfb_tmem_store: bool = False,
    sfb_per_cta_packed: bool = False,
    arch: str | None = None,
) -> str | None:
    """Why the kernel cannot run ``problem_mnkl`` = (weight N, activation rows, K, L) with
    ``tile`` and ``tactic``, or None when it can.

    Standard 128x4 activation scales match the kernel's per-CTA SFB layout only when all rows
    fit one tile (wide_tile.md §3.5); ``sfb_per_cta_packed`` says they were repacked per CTA.
    """
    if len(problem_mnkl) != 4:
        return f"a problem is (M, N, K, L), got {tuple(problem_mnkl)}"
    m, n, k, batch = (int(v) for v in problem_mnkl)
    if min(m, n, k, batch) <= 0:
        return f"problem (M, N, K, L) = {(m, n, k, batch)} must be positive"
    reason = config_reason(
        tile, tactic, dtypes, cta_m=cta_m, sfb_tmem_store=sfb_tmem_store, arch=arch
    )
    if reason is not None:
        return reason
    cta_k = int(tactic[0])
    if k % cta_k:
        return f"K {k} is not a multiple of cta_k {cta_k}"
    if n > tile and not sfb_tmem_store and not sfb_per_cta_packed:
        return (
            f"{n} activation rows exceed the {tile}-row tile: standard 128x4 activation "
            "scales match the kernel's per-CTA SFB layout only within one tile; use a tile "
            f">= {n} or repack the scales per CTA"
        )
    return None
