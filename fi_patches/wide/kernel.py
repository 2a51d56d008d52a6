"""``WideLowLatencyBlockscaledGemmKernel``: FlashInfer's low-latency block-scaled GEMM with an
honest host-side contract for activation tiles wider than 8 rows.

The kernel body is already written in terms of ``cta_n``; only the base class's
``can_implement`` / ``_smem_bytes`` pin it to 8 rows, and its ``num_sfb_tmem_stage=4`` default
busts TMEM at cta_k 512. The subclass is built on first use so importing this module imports
neither FlashInfer nor cutlass.
"""

from __future__ import annotations

import functools
from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.wide.budget import CTA_M, SUPPORTED_SPLIT_K, invalid_reason, smem_bytes, tile_reason
from fi_patches.wide.dtypes import GemmDtypes


def implement_reason(
    problem_sizes_mnkl: tuple[int, int, int, int],
    a_dtype: Any,
    b_dtype: Any,
    sf_dtype: Any,
    sf_vec_size: int,
    c_dtype: Any,
    mma_tiler_mnk: tuple[int, int, int | None] = (CTA_M, 16, None),
    num_ab_stage: int = 8,
    num_sfb_tmem_stage: int = 1,
    split_k: int = 1,
    sfb_tmem_store: bool = False,
    sfb_per_cta_packed: bool = False,
) -> str | None:
    """Why the wide kernel cannot implement the configuration (``can_implement``'s arguments),
    or None; ``cta_k`` None means FlashInfer's default ``4 * mma_k``."""
    dtypes = GemmDtypes.of(a_dtype, b_dtype, sf_dtype, sf_vec_size, c_dtype)
    cta_m, cta_n, cta_k = mma_tiler_mnk
    if cta_k is None:
        cta_k = 4 * dtypes.mma_k
    return invalid_reason(
        problem_sizes_mnkl,
        cta_n,
        (cta_k, num_ab_stage, num_sfb_tmem_stage, split_k),
        dtypes,
        cta_m=cta_m,
        sfb_tmem_store=sfb_tmem_store,
        sfb_per_cta_packed=sfb_per_cta_packed,
    )


@functools.cache
def wide_kernel_class() -> type[Any]:
    """The subclass, defined on first call over the installed FlashInfer and cached."""
    base: Any = fi.low_latency_kernel_class()

    class WideLowLatencyBlockscaledGemmKernel(base):  # type: ignore[misc]
        """FlashInfer's low-latency kernel for a ``(128, tile, cta_k)`` CTA tile, tile a
        multiple of 8 up to 128, with one SFB TMEM stage by default."""

        def __init__(
            self,
            acc_dtype: Any = None,
            mma_tiler_mnk: tuple[int, int, int] = (CTA_M, 16, 128),
            num_ab_stage: int = 8,
            num_sfb_tmem_stage: int = 1,
            sf_vec_size: int = 32,
            use_pdl: bool = False,
            pdl_count: int = -1,
            split_k: int = 1,
            sfb_tmem_store: bool = False,
            use_scale: bool = False,
            use_bias: bool = False,
        ) -> None:
            cta_m, cta_n, _ = mma_tiler_mnk
            reason = tile_reason(cta_n, cta_m=cta_m)
            if reason is None and split_k not in SUPPORTED_SPLIT_K:
                reason = f"split_k must be one of {SUPPORTED_SPLIT_K}, got {split_k}"
            if reason is None and sfb_tmem_store and cta_n != 8:
                reason = "sfb_tmem_store is not supported for wide tiles"
            if reason is not None:
                raise ValueError(f"unsupported wide tile {tuple(mma_tiler_mnk)}: {reason}")
            if acc_dtype is None:
                import cutlass

                acc_dtype = cutlass.Float32
            super().__init__(
                acc_dtype=acc_dtype,
                mma_tiler_mnk=mma_tiler_mnk,
                num_ab_stage=num_ab_stage,
                num_sfb_tmem_stage=num_sfb_tmem_stage,
                sf_vec_size=sf_vec_size,
                use_pdl=use_pdl,
                pdl_count=pdl_count,
                split_k=split_k,
                sfb_tmem_store=sfb_tmem_store,
                use_scale=use_scale,
                use_bias=use_bias,
            )
            self.max_n = cta_n
            """Most activation rows standard (128x4) scales may have for this tile."""

        @staticmethod
        def can_implement(
            problem_sizes_mnkl: tuple[int, int, int, int],
            a_dtype: Any,
            b_dtype: Any,
            sf_dtype: Any,
            sf_vec_size: int,
            c_dtype: Any,
            mma_tiler_mnk: tuple[int, int, int | None] = (CTA_M, 16, None),
            num_ab_stage: int = 8,
            num_sfb_tmem_stage: int = 1,
            split_k: int = 1,
            sfb_tmem_store: bool = False,
            sfb_per_cta_packed: bool = False,
        ) -> bool:
            """Whether the kernel supports the problem and configuration (base signature plus
            ``sfb_per_cta_packed``); :meth:`implement_reason` says why not."""
            return (
                implement_reason(
                    problem_sizes_mnkl,
                    a_dtype,
                    b_dtype,
                    sf_dtype,
                    sf_vec_size,
                    c_dtype,
                    mma_tiler_mnk,
                    num_ab_stage,
                    num_sfb_tmem_stage,
                    split_k,
                    sfb_tmem_store,
                    sfb_per_cta_packed,
                )
                is None
            )

        implement_reason = staticmethod(implement_reason)

        @staticmethod
        def wide_smem_bytes(
            a_dtype: Any,
            b_dtype: Any,
            sf_vec_size: int,
            cta_n: int,
            cta_k: int,
            num_ab_stage: int,
            num_sfb_tmem_stage: int = 1,
            split_k: int = 1,
        ) -> int:
            """Dynamic shared memory of a CTA for tile ``cta_n`` (the base's ``_smem_bytes``
            assumes 8 rows)."""
            sf = "Float8E4M3FN" if sf_vec_size == 16 else "Float8E8M0FNU"
            dtypes = GemmDtypes.of(a_dtype, b_dtype, sf, sf_vec_size, "BFloat16")
            return smem_bytes(cta_n, cta_k, num_ab_stage, num_sfb_tmem_stage, split_k, dtypes)

    WideLowLatencyBlockscaledGemmKernel.__module__ = __name__
    # The DSL names the generated kernel after the class's qualified name: keep it readable.
    WideLowLatencyBlockscaledGemmKernel.__qualname__ = "WideLowLatencyBlockscaledGemmKernel"
    return WideLowLatencyBlockscaledGemmKernel
