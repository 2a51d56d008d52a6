"""Every FlashInfer name ``fi_patches.chain`` needs beyond fi_patches' existing helpers, as
string constants with a probe each, resolved through importlib here only (to be folded into
``fi_patches/internals/``).

Also used, through existing helpers: ``fi_patches.cute_dsl.runner.cute_dsl_runner`` and
``workspace`` (the cute-dsl runner factory, ``mm_mxfp8``'s workspace), ``fi_patches.wide.runner``
and ``fi_patches.pinning.validate.mxfp8_bucket_of`` (``mm_mxfp8``'s tuner buckets).
"""

from __future__ import annotations

import importlib
from typing import Any

from fi_patches.chain.errors import UpstreamError
from fi_patches.compat.probes import CallableProbe, ModuleProbe, Probe

FLASHINFER = "flashinfer"
GEMM_BASE = "flashinfer.gemm.gemm_base"
LOW_LATENCY_MODULE = "flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm"

LOW_LATENCY_FACTORY = "_cutedsl_low_latency_blockscaled_gemm_runner"
"""``(sm_version, enable_pdl) -> TunableRunner``: the runner ``mm_mxfp8(backend=
"cutedsl_low_latency")`` uses (``lru_cache``d from 0.7.4)."""

REORDER_SCALES = "reorder_scale_factors"
"""``(sf, mn, k, sf_vec_size)``: E8M0 scales into the swizzled 128x4 layout the kernels read."""

MM_MXFP8 = "mm_mxfp8"
"""The public MXFP8 GEMM: the stock path ``validate`` times pinned chains against."""

AUTOTUNE = "autotune"
"""The public tuning context: ``validate`` tunes the stock path with it first."""

PROBES: dict[str, Probe] = {
    LOW_LATENCY_FACTORY: CallableProbe(
        GEMM_BASE, LOW_LATENCY_FACTORY, ("sm_version", "enable_pdl")
    ),
    REORDER_SCALES: CallableProbe(
        LOW_LATENCY_MODULE, REORDER_SCALES, ("sf", "mn", "k", "sf_vec_size")
    ),
    MM_MXFP8: CallableProbe(FLASHINFER, MM_MXFP8, ("a", "b", "a_descale", "b_descale")),
    AUTOTUNE: CallableProbe(FLASHINFER, AUTOTUNE, ("tune_mode",)),
    GEMM_BASE: ModuleProbe(GEMM_BASE),
}


def problems() -> list[str]:
    """One sentence per internal that is missing or changed here (empty when all hold)."""
    return [reason for probe in PROBES.values() if (reason := probe.check()) is not None]


def _resolve(module: str, name: str) -> Any:
    reason = PROBES[name].check()
    if reason is not None:
        raise UpstreamError(reason)
    return getattr(importlib.import_module(module), name)


def low_latency_runner(sm_version: int, enable_pdl: bool = True) -> Any:
    """FlashInfer's low-latency block-scaled GEMM runner for ``sm_version`` (e.g. 103)."""
    return _resolve(GEMM_BASE, LOW_LATENCY_FACTORY)(sm_version, enable_pdl)


def reorder_scale_factors(sf: Any, mn: int, k: int, sf_vec_size: int = 32) -> Any:
    return _resolve(LOW_LATENCY_MODULE, REORDER_SCALES)(sf, mn, k, sf_vec_size)


def mm_mxfp8() -> Any:
    return _resolve(FLASHINFER, MM_MXFP8)


def autotune() -> Any:
    return _resolve(FLASHINFER, AUTOTUNE)
