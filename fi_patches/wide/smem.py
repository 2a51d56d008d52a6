"""Dynamic shared memory the low-latency kernel requests, for any activation tile, and the
per-block capacity it must fit in.

FlashInfer's own ``_smem_bytes`` sizes the B buffers and the split-K mailbox for 8 rows only,
so it undercounts wide tiles (wide_tile.md §3.3); this formula follows the kernel's allocator
for general ``tile`` and equals the DSL's launch value.
"""

from __future__ import annotations

import functools
import re

from fi_patches._logging import get_logger
from fi_patches.wide.dtypes import MXFP8, GemmDtypes
from fi_patches.wide.limits import CTA_M, EPILOGUE_THREADS, SF_ATOM_ROWS, SMEM_CAPACITY_FALLBACK

logger = get_logger(__name__)

_ARCH = re.compile(r"^sm_?(\d{2,3})[af]?$")


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def mailbox_elements(tile: int, split_k: int, cta_m: int = CTA_M) -> int:
    """FP32 elements of the split-K mailbox: each of the ``split_k - 1`` sending CTAs ships its
    shard of every epilogue thread's accumulator values."""
    per_thread = cta_m * tile // EPILOGUE_THREADS
    return max(split_k - 1, 0) * EPILOGUE_THREADS * (per_thread // max(split_k, 1))


def smem_bytes(
    tile: int,
    cta_k: int,
    ab_stages: int,
    sfb_tmem_stages: int = 1,
    split_k: int = 1,
    dtypes: GemmDtypes = MXFP8,
    cta_m: int = CTA_M,
) -> int:
    """Bytes of dynamic shared memory one CTA of the kernel allocates for ``tile`` activation
    rows and the tactic ``(cta_k, ab_stages, sfb_tmem_stages, split_k)``."""
    # mbarriers: A/B full+empty per stage, SFB per TMEM stage, MMA->epilogue pair, TMEM
    # allocation, bias load; then the 4-byte TMEM base pointer.
    cursor = 16 * ab_stages + 16 * sfb_tmem_stages + 16 + 8 + 8 + 4
    # split-K mailbox barrier and its FP32 payload
    cursor = _align(cursor, 8) + 8 + 4 * mailbox_elements(tile, split_k, cta_m)
    a_bytes, b_bytes = dtypes.smem_bytes_per_element()
    sf_k = cta_k // dtypes.sf_vec
    sfb_padded_rows = _align(tile, SF_ATOM_ROWS)
    buffers = (
        int(cta_m * cta_k * a_bytes) * ab_stages,  # A (weight)
        int(tile * cta_k * b_bytes) * ab_stages,  # B (activation)
        cta_m * sf_k * ab_stages,  # SFA
        tile * sf_k * ab_stages,  # compact SFB (allocated on every path)
        sfb_padded_rows * sf_k * ab_stages,  # SFB padded to a whole 128-row atom
    )
    for size in buffers:
        cursor = _align(cursor, 128) + size
    return cursor


def arch_family(arch: str) -> str:
    """``sm_103a`` / ``sm_103f`` / ``sm103`` -> ``sm_103``; ValueError when not an arch."""
    match = _ARCH.match(arch.strip().lower())
    if match is None:
        raise ValueError(f"{arch!r} is not a GPU arch such as sm_103a")
    return f"sm_{match.group(1)}"


@functools.cache
def smem_capacity(arch: str = "sm_100") -> int:
    """Dynamic shared memory one block may request on ``arch`` (as the DSL checks it at launch),
    read from cutlass; :data:`SMEM_CAPACITY_FALLBACK` where cutlass is absent or has no entry."""
    family = arch_family(arch)
    try:
        try:
            from cutlass.memory import get_smem_capacity_in_bytes
        except ImportError:
            from cutlass.utils import get_smem_capacity_in_bytes
        return int(get_smem_capacity_in_bytes(family))
    except Exception as exc:
        logger.debug(
            "smem capacity of %s from cutlass failed (%s: %s); using %d B",
            family,
            type(exc).__name__,
            exc,
            SMEM_CAPACITY_FALLBACK,
        )
        return SMEM_CAPACITY_FALLBACK
