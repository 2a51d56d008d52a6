"""The wide kernel: its class and its compiled, cached instances.

``WideLowLatencyBlockscaledGemmKernel``: FlashInfer's low-latency block-scaled GEMM with an
honest host-side contract for activation tiles wider than 8 rows.

The kernel body is already written in terms of ``cta_n``; only the base class's
``can_implement`` / ``_smem_bytes`` pin it to 8 rows, and its ``num_sfb_tmem_stage=4`` default
busts TMEM at cta_k 512. The subclass is built on first use so importing this module imports
neither FlashInfer nor cutlass.

:func:`compile_wide` compiles the kernel once per (tile, tactic, arch, PDL, types), rejecting
invalid configurations first: the DSL compiles over-budget shared memory and fails only at
launch."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fi_patches._logging import get_logger
from fi_patches.internals import flashinfer as fi
from fi_patches.wide.budget import (
    CTA_M,
    MXFP8,
    SUPPORTED_SPLIT_K,
    GemmDtypes,
    config_reason,
    invalid_reason,
    resolve_arch,
    smem_bytes,
    tile_reason,
)
from fi_patches.wide.tactics import Tactic, typed_tactic


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


@dataclass(frozen=True)
class WideKey:
    """What a compiled wide kernel is specialized on; the problem shape is a runtime argument."""

    tile: int
    tactic: Tactic
    arch: str
    pdl: bool
    dtypes: GemmDtypes

    def __str__(self) -> str:
        pdl = "pdl" if self.pdl else "no-pdl"
        return f"tile {self.tile} tactic {self.tactic} {self.arch} {pdl}"


@dataclass(eq=False)
class WideKernel:
    """A DSL-compiled wide kernel: call it with the kernel's pointer arguments (see
    :func:`fi_patches.wide.launch.launch_wide`). ``ptx`` / ``cubin`` are the device code the
    DSL produced (None when compiled without keeping artifacts)."""

    key: WideKey
    function: Any
    ptx: str | None
    cubin: bytes | None
    compile_seconds: float
    _host_ir: str | None = field(default=None, repr=False)
    plans: dict[Any, Any] = field(default_factory=dict, repr=False)
    """Launch plans by problem shape (:func:`fi_patches.wide.launch.launch_plan`)."""

    @property
    def tile(self) -> int:
        return self.key.tile

    @property
    def tactic(self) -> Tactic:
        return self.key.tactic

    @property
    def arch(self) -> str:
        return self.key.arch

    @property
    def pdl(self) -> bool:
        return self.key.pdl

    def host_ir(self) -> str:
        """The lowered host module's text (holds the launch configuration), computed once."""
        if self._host_ir is None:
            self._host_ir = str(self.function.ir_module)
        return self._host_ir

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)


logger = get_logger(__name__)

POINTER_ALIGN = {"a": 16, "sfa": 32, "b": 16, "sfb": 16, "c": 16}
"""Assumed alignment of each pointer, as FlashInfer's runner declares them (launches must
meet them)."""

_cache: dict[WideKey, WideKernel] = {}
_lock = threading.Lock()


class WideConfigError(ValueError):
    """A wide tile or tactic the kernel cannot run; the message names the limit."""


def check_config(
    tile: int, tactic: Sequence[int], dtypes: GemmDtypes = MXFP8, *, arch: str | None = None
) -> Tactic:
    """``tactic`` as a :class:`Tactic`; WideConfigError with the reason when it is invalid."""
    try:
        checked = typed_tactic(tactic)
    except ValueError as exc:
        raise WideConfigError(str(exc)) from None
    reason = config_reason(tile, checked, dtypes, arch=arch)
    if reason is not None:
        raise WideConfigError(f"wide tile {tile} tactic {checked} is invalid: {reason}")
    return checked


def compile_wide(
    tile: int,
    tactic: Sequence[int],
    *,
    arch: str | None = None,
    pdl: bool = True,
    dtypes: GemmDtypes = MXFP8,
    keep_artifacts: bool = True,
    check: bool = True,
) -> WideKernel:
    """The kernel for ``tile`` activation rows and ``tactic``, compiled for ``arch`` (default:
    the current device's, see :func:`~fi_patches.wide.budget.resolve_arch`) or taken from the
    cache. No scale or bias; the output type is ``dtypes.c``.

    ``check=False`` skips the validity check, to measure what the DSL does with a config that
    does not fit (it compiles; the launch would fail): never launch such a kernel.
    """
    target = resolve_arch(arch)
    if check:
        checked = check_config(tile, tactic, dtypes, arch=target)
    else:
        try:
            checked = typed_tactic(tactic)
        except ValueError as exc:
            raise WideConfigError(str(exc)) from None
    key = WideKey(tile, checked, target, bool(pdl), dtypes)
    kernel = _cache.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _cache.get(key)
        if kernel is None:
            kernel = _compile(key, keep_artifacts)
            _cache[key] = kernel
    return kernel


def cached_kernels() -> tuple[WideKernel, ...]:
    """Every kernel compiled so far in this process."""
    return tuple(_cache.values())


def fake_arguments(dtypes: GemmDtypes, cta_k: int) -> tuple[Any, ...]:
    """Placeholder pointers, problem and stream for ``cute.compile`` (the shape is dynamic)."""
    from fi_patches.internals import cute_dsl

    a_t, b_t, sf_t, _, c_t = dtypes.cutlass_types()
    make_ptr, gmem, int32 = cute_dsl.make_ptr(), cute_dsl.gmem(), cute_dsl.numeric_type("Int32")

    def ptr(dtype: Any, role: str) -> Any:
        align = POINTER_ALIGN[role]
        return make_ptr(dtype, align, gmem, assumed_align=align)

    problem = tuple(int32(v) for v in (CTA_M, 8, cta_k, 1))
    return (
        ptr(a_t, "a"),
        ptr(sf_t, "sfa"),
        ptr(b_t, "b"),
        ptr(sf_t, "sfb"),
        ptr(c_t, "c"),
        None,
        None,
        problem,
        cute_dsl.fake_stream(),
    )


def _compile(key: WideKey, keep_artifacts: bool) -> WideKernel:
    from fi_patches.internals import cute_dsl

    cta_k, stages, sfb_stages, split_k = key.tactic
    kernel = wide_kernel_class()(
        acc_dtype=cute_dsl.numeric_type("Float32"),
        mma_tiler_mnk=(CTA_M, key.tile, cta_k),
        num_ab_stage=stages,
        num_sfb_tmem_stage=sfb_stages,
        sf_vec_size=key.dtypes.sf_vec,
        use_pdl=key.pdl,
        split_k=split_k,
    )
    options = f"--gpu-arch {key.arch}"
    dump_dir = tempfile.mkdtemp(prefix="fi_patches_wide_") if keep_artifacts else None
    if dump_dir is not None and any(ch in dump_dir for ch in " ,\t"):
        logger.warning("temp dir %r holds a separator; compiling without PTX/CUBIN", dump_dir)
        shutil.rmtree(dump_dir, ignore_errors=True)
        dump_dir = None
    if dump_dir is not None:
        options += f" --keep-ptx --keep-cubin --dump-dir {dump_dir}"
    start = time.perf_counter()
    try:
        compile_kernel = cute_dsl.compiler()
        function = compile_kernel(kernel, *fake_arguments(key.dtypes, cta_k), options=options)
    finally:
        if dump_dir is not None:
            shutil.rmtree(dump_dir, ignore_errors=True)
    seconds = time.perf_counter() - start
    artifacts = getattr(function, "artifacts", None)
    ptx = getattr(artifacts, "PTX", None)
    cubin = getattr(artifacts, "CUBIN", None)
    logger.info("compiled wide kernel %s in %.2f s", key, seconds)
    return WideKernel(
        key,
        function,
        ptx if isinstance(ptx, str) and not os.path.exists(ptx) else None,
        cubin if isinstance(cubin, bytes) else None,
        seconds,
    )
