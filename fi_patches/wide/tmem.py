"""Tensor-memory columns the low-latency kernel uses: accumulator, weight scales and staged
activation scales must fit the 256 columns it allocates (wide_tile.md §3.2)."""

from __future__ import annotations

from fi_patches.wide.dtypes import MXFP8, GemmDtypes
from fi_patches.wide.limits import CTA_M


def tmem_columns(
    tile: int,
    cta_k: int,
    sfb_tmem_stages: int = 1,
    dtypes: GemmDtypes = MXFP8,
    *,
    sfb_tmem_store: bool = False,
    cta_m: int = CTA_M,
) -> int:
    """Columns needed: ``tile`` FP32 accumulator columns, ``cta_m / 32`` SFA columns per MMA-K
    step, and per SFB stage 4 columns per MMA-K step (2 on the register-mediated path)."""
    mma_steps = cta_k // dtypes.mma_k
    sfa = (cta_m // 32) * mma_steps
    sfb_per_stage = mma_steps * (2 if sfb_tmem_store else 4)
    return tile + sfa + sfb_per_stage * sfb_tmem_stages
