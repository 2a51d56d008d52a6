"""Everything fi_patches uses from FlashInfer, named once (the CuTe DSL it compiles with is
declared in :mod:`fi_patches.internals.cute_dsl`).

Each internal is declared with its kind, the shape fi_patches relies on, the features that need
it and, where it can be exercised on any machine, a behavioural check; together these are its
probe. The rest of fi_patches reaches FlashInfer only through the accessors below, so supporting
a new release means reading this file against the release (see ``compat/README.md``).

The verified range and releases are stated once, in :data:`FLASHINFER` (declared with the other
dependencies in :mod:`fi_patches.internals`, re-exported here); the version switch is
the workspace helper :data:`WORKSPACE_HELPER`. FlashInfer's tuner contract, which the engine
needs for every op, is declared in :mod:`fi_patches.internals.tuner`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from packaging.version import Version

from fi_patches.internals import (
    ATTRIBUTE,
    CALLABLE,
    CLASS,
    FACTORY,
    FLASHINFER,
    METHOD,
    MODULE,
    PINNED_CUTE_DSL,
    PINNED_OPS,
    PINNED_TACTICS,
    PRESEED,
    WIDE_TILE,
    Declared,
    Internal,
    InternalError,
    OneOf,
)

__all__ = ["FLASHINFER", "PINNED_CUTE_DSL", "PINNED_OPS", "PINNED_TACTICS", "PRESEED", "WIDE_TILE"]

_TUNED = (PINNED_TACTICS, PINNED_CUTE_DSL)

GEMM_BASE = "flashinfer.gemm.gemm_base"
LOW_LATENCY = "flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm"
SPLIT_K = "flashinfer.gemm.kernels.dense_blockscaled_gemm_sm100_splitk"
DENSE = "flashinfer.gemm.kernels.dense_blockscaled_gemm_sm100"

MXFP8_OP = "mxfp8_gemm"
"""The custom-op name ``mm_mxfp8`` tunes its runners under (part of every tuner cache key)."""

WORKSPACE_NAME = "mm_mxfp8_workspace"
"""The buffer name ``mm_mxfp8`` asks its workspace helper for."""

_PROBE_PROBLEM = (512, 1024, 8)
"""``(n, k, rows)`` the behavioural checks exercise (small, valid on every release)."""


# behavioural checks ---------------------------------------------------------------------------


def _mxfp8_cutlass_dtypes() -> tuple[Any, ...]:
    from fi_patches.internals.cute_dsl import numeric_type

    fp8, scale, out = (numeric_type(n) for n in ("Float8E4M3FN", "Float8E8M0FNU", "BFloat16"))
    return (fp8, fp8, scale, 32, out)


def _is_tactic_list(value: Any, length: int) -> str | None:
    if not isinstance(value, (list, tuple)) or not value:
        return f"returned {type(value).__name__} {str(value)[:60]}, not a list of tactics"
    first = value[0]
    if not isinstance(first, (list, tuple)) or len(first) != length:
        return f"returned tactics like {str(first)[:60]}, not {length}-tuples"
    return None


def _check_autotune_tactics(fn: Any) -> str | None:
    n, k, rows = _PROBE_PROBLEM
    return _is_tactic_list(fn((n, rows, k, 1), *_mxfp8_cutlass_dtypes()), 4)


def _has_valid_tactics(runner: Any) -> str | None:
    if not callable(getattr(runner, "get_valid_tactics", None)):
        return f"returned {type(runner).__name__}, not a runner with get_valid_tactics"
    return None


def _check_low_latency_factory(fn: Any) -> str | None:
    return _has_valid_tactics(fn(103, True))


def _check_cute_dsl_factory(fn: Any) -> str | None:
    import torch

    return _has_valid_tactics(fn(10, 3, True, torch.bfloat16))


def _check_tuning_config(config: Any) -> str | None:
    bucket = config.dynamic_tensor_specs[0].map_to_tuning_buckets(5)
    if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 5:
        return f"its row bucket of 5 rows is {bucket!r}, not a row count of at least 5"
    return None


def _check_positive_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return f"it is {value!r}, not a positive byte count"
    return None


def _check_split_k_valid(method: Any) -> str | None:
    from fi_patches.internals.cute_dsl import numeric_type

    found = method(16, 7168, numeric_type("Float8E4M3FN"), 2)
    return None if isinstance(found, bool) else f"returned {found!r}, not a bool"


def _check_split_k_tiler(method: Any) -> str | None:
    found = method(16)
    if not (isinstance(found, (tuple, list)) and len(found) == 2):
        return f"returned {found!r}, not an (m, n) tile"
    return None


# declarations ---------------------------------------------------------------------------------

LOW_LATENCY_MODULE = Internal(
    "low_latency_module", MODULE, LOW_LATENCY, "", (PINNED_TACTICS, WIDE_TILE)
)
AUTOTUNE_TACTICS = Internal(
    "autotune_tactics",
    CALLABLE,
    LOW_LATENCY,
    "autotune_tactics",
    (PINNED_TACTICS,),
    params=("problem_sizes_mnkl", "a_dtype", "b_dtype", "sf_dtype", "sf_vec_size", "c_dtype"),
    check=_check_autotune_tactics,
)
LOW_LATENCY_RUNNER = Internal(
    "low_latency_runner",
    FACTORY,
    GEMM_BASE,
    "_cutedsl_low_latency_blockscaled_gemm_runner",
    (PINNED_TACTICS,),
    params=("sm_version", "enable_pdl"),
    builds="CutedslLowLatencyBlockscaledGemmRunner",
    methods=("get_valid_tactics", "get_cache_key_extras", "forward"),
    check=_check_low_latency_factory,
)
CUTE_DSL_RUNNER = Internal(
    "cute_dsl_runner",
    FACTORY,
    GEMM_BASE,
    "_cute_dsl_gemm_mxfp8_runner",
    (PINNED_CUTE_DSL,),
    params=("sm_major", "sm_minor", "enable_pdl", "out_dtype"),
    builds="CuteDSLMxfp8GemmRunner",
    methods=("get_valid_tactics", "forward"),
    check=_check_cute_dsl_factory,
)
CUTE_DSL_WARP_RUNNER = Internal(
    "cute_dsl_warp_runner",
    FACTORY,
    GEMM_BASE,
    "_cute_dsl_warp_splitk_mxfp8_gemm_runner",
    (PINNED_CUTE_DSL,),
    params=("enable_pdl",),
    builds="CuteDSLMxfp8WarpSplitKRunner",
    methods=("get_valid_tactics",),
    optional=True,
)
"""The warp split-K runner ``mm_mxfp8`` tunes beside the cute-dsl one (where a release has
it): silenced for pinned problems so the tuner profiles the pin alone."""

TUNING_CONFIG = Internal(
    "tuning_config",
    ATTRIBUTE,
    GEMM_BASE,
    "_MM_MXFP8_CUTE_DSL_TUNING_CONFIG",
    _TUNED,
    check=_check_tuning_config,
)
WORKSPACE_SIZE = Internal(
    "workspace_size",
    ATTRIBUTE,
    GEMM_BASE,
    "DEFAULT_WORKSPACE_SIZE",
    (PINNED_CUTE_DSL,),
    check=_check_positive_int,
)
WORKSPACE_HELPER = OneOf(
    "workspace_helper",
    (
        Internal(
            "stream_cache_buf", CALLABLE, GEMM_BASE, "_get_stream_cache_buf", params=("name",)
        ),
        Internal("gemm_cache_buf", CALLABLE, GEMM_BASE, "_get_cache_buf", params=("name",)),
        Internal(
            "utils_cache_buf", CALLABLE, "flashinfer.utils", "_get_cache_buf", params=("name",)
        ),
    ),
    (PINNED_CUTE_DSL,),
)
"""``mm_mxfp8``'s workspace buffer: per device and stream from 0.7.4, ``_get_cache_buf``
before (imported into gemm_base up to 0.7.2.post1, defined in ``flashinfer.utils`` always)."""

COMPUTE_CAPABILITY = Internal(
    "get_compute_capability",
    CALLABLE,
    GEMM_BASE,
    "get_compute_capability",
    (PINNED_CUTE_DSL,),
    params=("device",),
)
MM_MXFP8 = Internal(
    "mm_mxfp8",
    CALLABLE,
    "flashinfer",
    "mm_mxfp8",
    (PINNED_CUTE_DSL,),
    params=("a", "b", "a_descale", "b_descale", "out", "out_dtype"),
)
MXFP8_QUANTIZE = Internal(
    "mxfp8_quantize", CALLABLE, "flashinfer", "mxfp8_quantize", (), params=("input",)
)
SPLIT_K_VALID = Internal(
    "split_k_is_valid_tactic",
    METHOD,
    SPLIT_K,
    "Sm100BlockScaledSplitKGemmKernel.is_valid_tactic",
    (PINNED_CUTE_DSL,),
    check=_check_split_k_valid,
)
SPLIT_K_TILER = Internal(
    "split_k_mma_tiler_mn_for_m",
    METHOD,
    SPLIT_K,
    "Sm100BlockScaledSplitKGemmKernel.mma_tiler_mn_for_m",
    (PINNED_CUTE_DSL,),
    check=_check_split_k_tiler,
)
NARROW_TILE_OK = Internal(
    "dense_narrow_tile_ok",
    METHOD,
    DENSE,
    "Sm100BlockScaledPersistentDenseGemmKernel.narrow_tile_ok",
    (PINNED_CUTE_DSL,),
    params=("tile_n", "kernel_n"),
    since=Version("0.7.1"),
)
"""The dense kernel's narrow-tile envelope (from 0.7.1: the cute-dsl runner swaps a tactic
outside it for its fallback, so a pin must be checked against it)."""

KERNEL_TMA_ARGUMENTS = {
    "a": "tma_atom_a",
    "sfa": "tma_atom_sfa",
    "b": "tma_atom_b",
    "sfb": "tma_atom_sfb",
}
"""The low-latency kernel method's TMA-atom parameters, per operand (the PDL check reads them)."""

LOW_LATENCY_KERNEL = Internal(
    "low_latency_kernel", CLASS, LOW_LATENCY, "LowLatencyBlockscaledGemmKernel", (WIDE_TILE,)
)
KERNEL_INIT = Internal(
    "low_latency_kernel_init",
    METHOD,
    LOW_LATENCY,
    "LowLatencyBlockscaledGemmKernel.__init__",
    (WIDE_TILE,),
    params=(
        "acc_dtype",
        "mma_tiler_mnk",
        "num_ab_stage",
        "num_sfb_tmem_stage",
        "sf_vec_size",
        "use_pdl",
    ),
)
KERNEL_CALL = Internal(
    "low_latency_kernel_call",
    METHOD,
    LOW_LATENCY,
    "LowLatencyBlockscaledGemmKernel.__call__",
    (WIDE_TILE,),
    params=(
        "a_ptr",
        "sfa_ptr",
        "b_ptr",
        "sfb_ptr",
        "c_ptr",
        "scale_ptr",
        "bias_ptr",
        "problem_mnkl",
    ),
)
KERNEL_CAN_IMPLEMENT = Internal(
    "low_latency_can_implement",
    METHOD,
    LOW_LATENCY,
    "LowLatencyBlockscaledGemmKernel.can_implement",
    (PINNED_TACTICS, WIDE_TILE),
)
KERNEL_BODY = Internal(
    "low_latency_kernel_body",
    METHOD,
    LOW_LATENCY,
    "LowLatencyBlockscaledGemmKernel.kernel",
    (WIDE_TILE,),
    params=(
        "tiled_mma",
        "tiled_mma_sfb",
        "tma_atom_a",
        "mA_mkl",
        "tma_atom_b",
        "mB_nkl",
        "tma_atom_sfa",
        "sfa",
        "tma_atom_sfb",
    ),
)
"""The kernel method: its leading arguments place the TMA descriptors the PDL check reads."""
REORDER_SCALE_FACTORS = Internal(
    "reorder_scale_factors",
    CALLABLE,
    LOW_LATENCY,
    "reorder_scale_factors",
    (),
    params=("sf", "mn", "k", "sf_vec_size"),
)
"""E8M0 scales into the swizzled 128x4 layout the kernels read (``validate``'s operands)."""

AUTOTUNE = Internal("autotune", CALLABLE, "flashinfer", "autotune", (), params=("tune_mode",))
"""The public tuning context (``validate`` tunes the stock path with it)."""

REORDER_SCALES = Internal(
    "reorder_scale_factors_per_cta",
    CALLABLE,
    LOW_LATENCY,
    "reorder_scale_factors_per_cta",
    (WIDE_TILE,),
)

INTERNALS: tuple[Declared, ...] = (
    LOW_LATENCY_MODULE,
    AUTOTUNE_TACTICS,
    LOW_LATENCY_RUNNER,
    CUTE_DSL_RUNNER,
    CUTE_DSL_WARP_RUNNER,
    TUNING_CONFIG,
    WORKSPACE_SIZE,
    WORKSPACE_HELPER,
    COMPUTE_CAPABILITY,
    MM_MXFP8,
    MXFP8_QUANTIZE,
    SPLIT_K_VALID,
    SPLIT_K_TILER,
    NARROW_TILE_OK,
    LOW_LATENCY_KERNEL,
    KERNEL_INIT,
    KERNEL_CALL,
    KERNEL_CAN_IMPLEMENT,
    KERNEL_BODY,
    REORDER_SCALES,
    REORDER_SCALE_FACTORS,
    AUTOTUNE,
)
"""Every internal fi_patches uses, in the order ``doctor --json`` lists their probes."""


# accessors ------------------------------------------------------------------------------------


def autotune_tactics(n: int, k: int, rows: int) -> list[tuple[int, ...]]:
    """The low-latency enumerator's MXFP8 tactics for ``rows`` rows of an ``(n, k)`` weight."""
    from fi_patches.pins.keys import as_tactic

    found = AUTOTUNE_TACTICS.resolve()((n, rows, k, 1), *_mxfp8_cutlass_dtypes())
    return [as_tactic(t) for t in found]


def low_latency_runner(sm_version: int, enable_pdl: bool = True) -> Any:
    """The runner ``mm_mxfp8(backend="cutedsl_low_latency")`` tunes on this arch."""
    return LOW_LATENCY_RUNNER.resolve()(sm_version, enable_pdl)


def cute_dsl_runner(sm_major: int, sm_minor: int, enable_pdl: bool, out_dtype: Any) -> Any:
    """The runner ``mm_mxfp8(backend="cute-dsl")`` tunes on this arch for ``out_dtype``."""
    return CUTE_DSL_RUNNER.resolve()(sm_major, sm_minor, enable_pdl, out_dtype)


def tuning_config() -> Any:
    """``mm_mxfp8``'s tuning config (its first dynamic spec maps rows to buckets)."""
    return TUNING_CONFIG.resolve()


def bucket_of() -> Callable[[int], int]:
    """FlashInfer's row-to-bucket map of ``mm_mxfp8``'s tuner (one cache entry per bucket)."""
    mapper: Callable[[int], int] = tuning_config().dynamic_tensor_specs[0].map_to_tuning_buckets
    return mapper


def workspace_size() -> int:
    """``mm_mxfp8``'s workspace size in bytes (part of every tuner cache key)."""
    return int(WORKSPACE_SIZE.resolve())


def workspace_helper() -> tuple[str, Any]:
    """``(dotted name, function)`` of the workspace helper ``mm_mxfp8`` uses on this release."""
    option = WORKSPACE_HELPER.resolved_option()
    return option.path, option.resolve()


def workspace(device: Any) -> Any:
    """``mm_mxfp8``'s own workspace buffer for ``device``."""
    _, helper = workspace_helper()
    return helper(WORKSPACE_NAME, workspace_size(), device)


def compute_capability(device: Any) -> tuple[int, int]:
    """``(major, minor)`` of ``device`` as FlashInfer reads it."""
    major, minor = COMPUTE_CAPABILITY.resolve()(device)
    return int(major), int(minor)


def package() -> Any:
    """The ``flashinfer`` package itself (hot paths read ``mm_mxfp8`` from it per call, so a
    consumer's own patch of it is honoured)."""
    import importlib

    return importlib.import_module(FLASHINFER.module)


def mm_mxfp8() -> Callable[..., Any]:
    """``flashinfer.mm_mxfp8``, looked up now (so a consumer's own patch of it is honoured)."""
    fn: Callable[..., Any] = MM_MXFP8.resolve()
    return fn


def mxfp8_quantize() -> Callable[..., Any]:
    """``flashinfer.mxfp8_quantize``."""
    fn: Callable[..., Any] = MXFP8_QUANTIZE.resolve()
    return fn


def split_k_kernel() -> Any:
    """FlashInfer's split-K cute-dsl kernel class (its validity predicates)."""
    return SPLIT_K_VALID.resolve().__self__


def narrow_tile_ok() -> Callable[[int, int], bool] | None:
    """The dense kernel's narrow-tile predicate, or None where the release has none."""
    try:
        fn: Callable[[int, int], bool] = NARROW_TILE_OK.resolve()
    except InternalError:
        return None
    return fn


def low_latency_kernel_class() -> type:
    """FlashInfer's ``LowLatencyBlockscaledGemmKernel`` (the wide kernel's base class)."""
    cls: type = LOW_LATENCY_KERNEL.resolve()
    return cls


def kernel_tma_param_indices() -> dict[str, int]:
    """PTX parameter index of each operand's TMA descriptor: the kernel method's arguments, in
    order, lower one parameter each."""
    import inspect

    names = list(inspect.signature(KERNEL_BODY.resolve()).parameters)[1:]
    return {role: names.index(arg) for role, arg in KERNEL_TMA_ARGUMENTS.items()}


def reorder_scale_factors_per_cta() -> Callable[..., Any]:
    """FlashInfer's per-CTA activation-scale reorder of the low-latency kernel."""
    fn: Callable[..., Any] = REORDER_SCALES.resolve()
    return fn


def reorder_scale_factors() -> Callable[..., Any]:
    """FlashInfer's swizzle of E8M0 scales into the 128x4 layout its kernels read."""
    fn: Callable[..., Any] = REORDER_SCALE_FACTORS.resolve()
    return fn


def autotune() -> Callable[..., Any]:
    """``flashinfer.autotune``, the public tuning context."""
    fn: Callable[..., Any] = AUTOTUNE.resolve()
    return fn
