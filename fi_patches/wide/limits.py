"""Fixed limits of FlashInfer's low-latency block-scaled kernel that the wide-tile checks use.

They come from the kernel's source (0.7.x) and the Blackwell hardware it targets; see
``shared/reference/wide_tile.md`` §3 for how each was established.
"""

from __future__ import annotations

CTA_M = 128
"""The kernel's M tile (weight rows, i.e. output features per CTA); the only one it supports."""

MIN_TILE = 8
"""Narrowest activation tile: FlashInfer's stock tile."""

MAX_TILE = 128
"""Widest activation tile: the SFB TMEM column count assumes one 128-row scale atom per tile."""

TILE_STEP = 8
"""The block-scaled MMA needs N to be a multiple of 8."""

MAX_AB_STAGES = 12
"""Most A/B shared-memory pipeline stages the kernel accepts (``_MAX_AB_STAGES``)."""

SUPPORTED_SPLIT_K = (1, 2, 4, 8)
"""Cluster split-K factors the kernel supports (``_SUPPORTED_SPLIT_K``)."""

TMEM_COLUMNS = 256
"""TMEM columns the kernel allocates (half of the 512 of an SM), so its budget."""

SMEM_CAPACITY_FALLBACK = 232448
"""Dynamic shared memory per block on sm_100/sm_103 ((228 - 1) KiB), used when cutlass is absent."""

MX_CTA_K_MULTIPLE = 128
"""MX (vec-32) TMA layouts are built from four 32-wide MMA-K atoms: cta_k must be a multiple."""

SF_ATOM_ROWS = 128
"""Rows of one scale-factor atom (32 x 4) of the standard 128x4 swizzled layout."""

SF_ATOM_COLS = 4
"""Scale-factor columns (K blocks) of one atom of the standard 128x4 swizzled layout."""

THREADS_PER_CTA = 384
"""Twelve warps; the epilogue's four warps (128 threads) hold the accumulator."""

EPILOGUE_THREADS = 128
"""Threads that share a CTA's accumulator (and the split-K mailbox)."""
