"""Everything fi_patches uses from FlashInfer (and the CuTe DSL it compiles with), named once.

Each internal is declared with its kind, the shape fi_patches relies on, the features that need
it and, where it can be exercised on any machine, a behavioural check; together these are its
probe. The rest of fi_patches reaches FlashInfer only through the accessors below, so supporting
a new release means reading this file against the release (see ``compat/README.md``).

The verified range is stated once, in :data:`FLASHINFER`; version switches are
:data:`POLICY_KEYED_BY_IDENTITY` and the workspace helper :data:`WORKSPACE_HELPER`.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_patches.internals._declare import (
    ATTRIBUTE,
    CALLABLE,
    CLASS,
    FACTORY,
    METHOD,
    MODULE,
    Declared,
    Dependency,
    Internal,
    InternalError,
    OneOf,
)

FLASHINFER = Dependency(
    distribution="flashinfer-python",
    module="flashinfer",
    verified=SpecifierSet(">=0.7.0,<=0.7.4"),
    label="FlashInfer",
)
"""FlashInfer, and the releases every feature is verified on (prerelease-aware: 0.7.5rc1 and
0.7.4.post1 are not 0.7.4)."""

PINNED_TACTICS, PINNED_CUTE_DSL, WIDE_TILE, PRESEED = (
    "pinned_tactics",
    "pinned_cute_dsl",
    "wide_tile",
    "preseed",
)
_TUNED = (PINNED_TACTICS, PINNED_CUTE_DSL)

GEMM_BASE = "flashinfer.gemm.gemm_base"
AUTOTUNER = "flashinfer.autotuner"
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
    import cutlass

    return (cutlass.Float8E4M3FN, cutlass.Float8E4M3FN, cutlass.Float8E8M0FNU, 32, cutlass.BFloat16)


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


def _check_tuner_get(get: Any) -> str | None:
    instance = get()
    if not isinstance(getattr(instance, "is_tuning_mode", None), bool):
        return "the tuner it returns has no boolean is_tuning_mode"
    return None


def _check_positive_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return f"it is {value!r}, not a positive byte count"
    return None


def _check_mapping_method(method: Any) -> str | None:
    found = method(tuner())
    if not isinstance(found, MutableMapping):
        return f"returned {type(found).__name__}, not a mutable mapping"
    return None


def _check_mapping(value: Any) -> str | None:
    if not isinstance(value, MutableMapping):
        return f"it is {type(value).__name__}, not a mutable mapping"
    return None


def _check_lock(value: Any) -> str | None:
    if not (hasattr(value, "__enter__") and hasattr(value, "__exit__")):
        return f"it is {type(value).__name__}, not a lock"
    return None


def _probe_key_parts() -> tuple[Any, list[Any]]:
    from fi_patches.pinning.probe_inputs import mxfp8_runner_inputs

    n, k, rows = _PROBE_PROBLEM
    runner = LOW_LATENCY_RUNNER.resolve()(100, True)
    return runner, mxfp8_runner_inputs(n, k, rows, workspace_bytes=workspace_size())


def _check_input_sizes(method: Any) -> str | None:
    _, inputs = _probe_key_parts()
    sizes = tuple(method(tuner(), inputs))
    if len(sizes) != len(inputs) or not all(isinstance(s, tuple) for s in sizes):
        return f"returned {str(sizes)[:80]}, not one size tuple per input"
    return None


def _check_cache_key(method: Any) -> str | None:
    runner, inputs = _probe_key_parts()
    sizes = tuple(tuple(t.size()) if hasattr(t, "size") else (0,) for t in inputs)
    extras = runner.get_cache_key_extras(inputs)
    key = method(MXFP8_OP, runner, sizes, tuning_config(), extras)
    if key != method(MXFP8_OP, runner, sizes, tuning_config(), extras) or hash(key) is None:
        return "two keys of one problem differ"
    return None


def _check_policy(method: Any) -> str | None:
    found = method(tuning_config())
    if found != method(tuning_config()) or hash(found) is None:
        return "two policies of one config differ"
    return None


def _check_split_k_valid(method: Any) -> str | None:
    import cutlass

    found = method(16, 7168, cutlass.Float8E4M3FN, 2)
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
    (PINNED_TACTICS, PRESEED),
    params=("problem_sizes_mnkl", "a_dtype", "b_dtype", "sf_dtype", "sf_vec_size", "c_dtype"),
    check=_check_autotune_tactics,
)
LOW_LATENCY_RUNNER = Internal(
    "low_latency_runner",
    FACTORY,
    GEMM_BASE,
    "_cutedsl_low_latency_blockscaled_gemm_runner",
    (PINNED_TACTICS, PRESEED),
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
    (PINNED_CUTE_DSL, PRESEED),
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
    (*_TUNED, PRESEED),
    check=_check_tuning_config,
)
TUNABLE_RUNNER = Internal("tunable_runner", CLASS, AUTOTUNER, "TunableRunner", (*_TUNED, WIDE_TILE))
RUNNER_VALID_TACTICS = Internal(
    "runner_get_valid_tactics",
    METHOD,
    AUTOTUNER,
    "TunableRunner.get_valid_tactics",
    (*_TUNED, WIDE_TILE),
    params=("inputs", "profile"),
)
AUTOTUNER_CLASS = Internal("autotuner", CLASS, AUTOTUNER, "AutoTuner", (*_TUNED, PRESEED))
AUTOTUNER_GET = Internal(
    "autotuner_get", METHOD, AUTOTUNER, "AutoTuner.get", (*_TUNED, PRESEED), check=_check_tuner_get
)
SEARCH_CACHE = Internal(
    "search_cache",
    METHOD,
    AUTOTUNER,
    "AutoTuner.search_cache",
    (*_TUNED, PRESEED),
    params=("custom_op", "runners", "input_shapes", "tuning_config", "inputs"),
)
WINNER_CACHE = Internal(
    "winner_cache",
    METHOD,
    AUTOTUNER,
    "AutoTuner._winner_cache",
    (PRESEED,),
    check=_check_mapping_method,
)
WINNER_CACHE_IDENTITY = Internal(
    "winner_cache_identity",
    METHOD,
    AUTOTUNER,
    "AutoTuner._winner_cache_identity",
    (PRESEED,),
    since=Version("0.7.1"),
)
"""Present from 0.7.1, where cached measurement policies are keyed by ``(identity, key)``."""

PROFILING_POLICIES = Internal(
    "profiling_cache_policies",
    ATTRIBUTE,
    AUTOTUNER,
    "AutoTuner.get()._profiling_cache_policies",
    (PRESEED,),
    check=_check_mapping,
)
PROFILING_POLICY = Internal(
    "profiling_policy",
    METHOD,
    AUTOTUNER,
    "AutoTuner._profiling_policy",
    (PRESEED,),
    params=("tuning_config",),
    check=_check_policy,
)
GET_CACHE_KEY = Internal(
    "get_cache_key",
    METHOD,
    AUTOTUNER,
    "AutoTuner._get_cache_key",
    (PRESEED,),
    params=("custom_op", "runner", "input_shapes", "tuning_config"),
    check=_check_cache_key,
)
GET_INPUT_SIZES = Internal(
    "get_input_sizes",
    METHOD,
    AUTOTUNER,
    "AutoTuner._get_input_sizes",
    (PRESEED,),
    params=("inputs",),
    check=_check_input_sizes,
)
TUNER_LOCK = Internal(
    "tuner_lock", ATTRIBUTE, AUTOTUNER, "AutoTuner.get()._lock", (PRESEED,), check=_check_lock
)
PROFILING_CACHE = Internal(
    "profiling_cache",
    ATTRIBUTE,
    AUTOTUNER,
    "AutoTuner.get().profiling_cache",
    (PRESEED,),
    check=_check_mapping,
)
"""The live in-process winners (read by ``fi_patches.pins.record.from_tuner``); the store
``_winner_cache`` returns in v1 flows, so preseeding writes into it."""

WORKSPACE_SIZE = Internal(
    "workspace_size",
    ATTRIBUTE,
    GEMM_BASE,
    "DEFAULT_WORKSPACE_SIZE",
    (PINNED_CUTE_DSL, PRESEED),
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
    (PINNED_TACTICS, WIDE_TILE, PRESEED),
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
DSL_COMPILE = Internal("cute_compile", CALLABLE, "cutlass.cute", "compile", (WIDE_TILE,))
DSL_FAKE_STREAM = Internal(
    "cute_make_fake_stream", CALLABLE, "cutlass.cute.runtime", "make_fake_stream", (WIDE_TILE,)
)

INTERNALS: tuple[Declared, ...] = (
    LOW_LATENCY_MODULE,
    AUTOTUNE_TACTICS,
    LOW_LATENCY_RUNNER,
    CUTE_DSL_RUNNER,
    CUTE_DSL_WARP_RUNNER,
    TUNING_CONFIG,
    TUNABLE_RUNNER,
    RUNNER_VALID_TACTICS,
    AUTOTUNER_CLASS,
    AUTOTUNER_GET,
    SEARCH_CACHE,
    WINNER_CACHE,
    WINNER_CACHE_IDENTITY,
    PROFILING_POLICIES,
    PROFILING_POLICY,
    GET_CACHE_KEY,
    GET_INPUT_SIZES,
    TUNER_LOCK,
    PROFILING_CACHE,
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
    DSL_COMPILE,
    DSL_FAKE_STREAM,
)
"""Every internal fi_patches uses, in the order ``doctor --json`` lists their probes."""


# version switches -----------------------------------------------------------------------------

POLICY_KEYED_BY_IDENTITY = Version("0.7.1")
"""From this release the tuner keys cached measurement policies by ``(identity, key)``; before,
by the cache key alone."""


# accessors ------------------------------------------------------------------------------------


def tuner() -> Any:
    """FlashInfer's tuner singleton."""
    return AUTOTUNER_GET.resolve()()


def tunable_runner() -> type:
    """FlashInfer's runner base class (``TunableRunner``)."""
    cls: type = TUNABLE_RUNNER.resolve()
    return cls


def autotuner_class() -> type:
    """FlashInfer's ``AutoTuner`` class (the tuner-cache wrapper patches its ``search_cache``)."""
    cls: type = AUTOTUNER_CLASS.resolve()
    return cls


def is_tuning(instance: Any) -> bool:
    """Whether the tuner is inside ``flashinfer.autotune(True)``."""
    return bool(instance.is_tuning_mode)


def autotune_tactics(n: int, k: int, rows: int) -> list[tuple[int, ...]]:
    """The low-latency enumerator's MXFP8 tactics for ``rows`` rows of an ``(n, k)`` weight."""
    found = AUTOTUNE_TACTICS.resolve()((n, rows, k, 1), *_mxfp8_cutlass_dtypes())
    return [tuple(t) for t in found]


def low_latency_runner(sm_version: int, enable_pdl: bool = True) -> Any:
    """The runner ``mm_mxfp8(backend="cutedsl_low_latency")`` tunes on this arch."""
    return LOW_LATENCY_RUNNER.resolve()(sm_version, enable_pdl)


def cute_dsl_runner(sm_major: int, sm_minor: int, enable_pdl: bool, out_dtype: Any) -> Any:
    """The runner ``mm_mxfp8(backend="cute-dsl")`` tunes on this arch for ``out_dtype``."""
    return CUTE_DSL_RUNNER.resolve()(sm_major, sm_minor, enable_pdl, out_dtype)


def runner_class_location(internal: Internal) -> tuple[str, str]:
    """``(module, class name)`` of the runner class a factory builds."""
    return internal.module, internal.builds


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


# the tuner's cache, for preseeding ------------------------------------------------------------


def input_sizes(instance: Any, inputs: list[Any]) -> tuple[tuple[int, ...], ...]:
    """The input shapes as the tuner reads them (a non-tensor input counts as ``(0,)``)."""
    return tuple(GET_INPUT_SIZES.resolve()(instance, inputs))


def cache_key(instance: Any, runner: Any, inputs: list[Any]) -> Any:
    """The key FlashInfer's tuner caches ``runner``'s winner for ``inputs`` under."""
    sizes = input_sizes(instance, inputs)
    return GET_CACHE_KEY.resolve()(
        MXFP8_OP, runner, sizes, tuning_config(), runner.get_cache_key_extras(inputs)
    )


def winner_cache(instance: Any) -> MutableMapping[Any, Any]:
    """The store the tuner reads winners from (the v1 cache or the active v2 partition)."""
    store: MutableMapping[Any, Any] = WINNER_CACHE.resolve()(instance)
    return store


def policy_store(instance: Any) -> MutableMapping[Any, Any]:
    """Where the tuner keeps each cached winner's measurement policy."""
    store: MutableMapping[Any, Any] = instance._profiling_cache_policies
    return store


def policy(config: Any) -> Any:
    """The measurement policy the tuner records beside a winner tuned under ``config``."""
    return PROFILING_POLICY.resolve()(config)


def policy_key(instance: Any, key: Any, version: Version | None) -> Any:
    """The policy store's key for the winner cached under ``key`` (see
    :data:`POLICY_KEYED_BY_IDENTITY`)."""
    if version is not None and version < POLICY_KEYED_BY_IDENTITY:
        return key
    return (WINNER_CACHE_IDENTITY.resolve()(instance), key)


def tuner_lock(instance: Any) -> Any:
    """The tuner's own lock (held while seeding)."""
    return instance._lock


def live_winners(instance: Any) -> MutableMapping[Any, Any]:
    """The in-process winners FlashInfer tuned or loaded (``profiling_cache``)."""
    store: MutableMapping[Any, Any] = instance.profiling_cache
    return store
