"""Helpers around FlashInfer's real low-latency runner and tuner cache for the tests."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from fi_patches.pins import PinTable
from tests.mxfp8_inputs import Mxfp8Problem

LL_CLASS = "CutedslLowLatencyBlockscaledGemmRunner"
SHAPE = (7168, 1536)
OTHER_SHAPE = (1536, 7168)


def gemm_base() -> Any:
    return importlib.import_module("flashinfer.gemm.gemm_base")


def factory() -> Any:
    return gemm_base()._cutedsl_low_latency_blockscaled_gemm_runner


def runner(sm: int = 103) -> Any:
    return factory()(sm, True)


def clear_factory_cache() -> None:
    """Make the next factory call build a new runner (0.7.4 caches it; older releases don't)."""
    clear = getattr(factory(), "cache_clear", None)
    if clear is not None:
        clear()


def offered(r: Any, n: int, k: int, rows: int) -> list[tuple[int, ...]]:
    return [tuple(t) for t in r.get_valid_tactics(Mxfp8Problem(n, k, rows).runner_inputs(), None)]


def stock(n: int, k: int, rows: int) -> list[tuple[int, ...]]:
    """FlashInfer's own enumeration for the problem (the runner's list without fi_patches)."""
    import cutlass

    module = importlib.import_module(
        "flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm"
    )
    return [
        tuple(t)
        for t in module.autotune_tactics(
            (n, rows, k, 1),
            cutlass.Float8E4M3FN,
            cutlass.Float8E4M3FN,
            cutlass.Float8E8M0FNU,
            32,
            cutlass.BFloat16,
        )
    ]


def non_split_alternative(n: int, k: int, rows: int, skip: int = 1) -> tuple[int, ...]:
    """A valid split-K-free tactic that is not FlashInfer's default (its first tactic)."""
    choices = [t for t in stock(n, k, rows)[1:] if t[3] == 1]
    return choices[skip - 1]


def table(*entries: dict[str, Any], device: str = "sm_103", source: str = "<test>") -> PinTable:
    return PinTable.from_mapping(
        {"meta": {"device": device, "flashinfer": ">=0.7.0"}, "low_latency": list(entries)},
        source=source,
    )


def entry(n: int, k: int, lo: int, hi: int, tactic: tuple[int, ...]) -> dict[str, Any]:
    return {"n": n, "k": k, "min_rows": lo, "max_rows": hi, "tactic": list(tactic)}


def mm(flashinfer: Any, problem: Mxfp8Problem) -> BaseException:
    """Call ``mm_mxfp8`` on the low-latency backend; on CPU it must fail at the launch."""
    try:
        flashinfer.mm_mxfp8(
            *problem.mm_args(), out_dtype=torch.bfloat16, backend="cutedsl_low_latency"
        )
    except Exception as exc:
        return exc
    raise AssertionError("mm_mxfp8 launched a kernel on CPU")


def cached_low_latency(tuner: Any, n: int, k: int) -> dict[int, Any]:
    """The tuner's cached low-latency winners for weight ``(n, k)``: bucket rows -> tactic."""
    found = {}
    for key, value in tuner.profiling_cache.items():
        if key.runner_class_name != LL_CLASS:
            continue
        shapes = key.nearest_profile
        if tuple(shapes[1]) == (k, n):
            found[int(shapes[0][0])] = tuple(value[0])
    return found


def served(tuner: Any, n: int, k: int, rows: int) -> Any:
    """The tactic FlashInfer's own cache lookup serves for the low-latency runner at ``rows``
    rows of weight ``(n, k)`` outside tuning, or None on a miss."""
    problem = Mxfp8Problem(n, k, rows)
    inputs = problem.runner_inputs(gemm_base().DEFAULT_WORKSPACE_SIZE)
    shapes = tuple(tuner._get_input_sizes(inputs))
    hit, _, tactic, _ = tuner.search_cache(
        "mxfp8_gemm",
        [runner()],
        shapes,
        gemm_base()._MM_MXFP8_CUTE_DSL_TUNING_CONFIG,
        inputs=inputs,
    )
    return tuple(tactic) if hit else None


def offered_source(n: int = SHAPE[0], k: int = SHAPE[1]) -> str:
    """The source of ``offered(rows)`` for a child process's script (it needs ``torch`` and
    FlashInfer's ``gemm_base`` imported): the tactics FlashInfer's real low-latency runner
    offers for an ``(n, k)`` problem of ``rows`` rows on sm_103, as lists."""
    return f"""def offered(rows):
    a = torch.empty(rows, {k}, dtype=torch.float8_e4m3fn)
    b = torch.empty({n}, {k}, dtype=torch.float8_e4m3fn).t()
    inputs = [a, b, torch.empty(1, dtype=torch.uint8), torch.empty(1, dtype=torch.uint8),
              torch.bfloat16, torch.empty(rows, {n}, dtype=torch.bfloat16),
              torch.empty(1, dtype=torch.uint8)]
    runner = gemm_base._cutedsl_low_latency_blockscaled_gemm_runner(103, True)
    return [list(t) for t in runner.get_valid_tactics(inputs, None)]
"""
