"""Skips and shared builders for the wide-tile tests."""

from __future__ import annotations

import importlib
import shutil
from typing import Any

import pytest

from tests.conftest import flashinfer_or_skip

LOW_LATENCY = "flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm"
BLACKWELL = ((10, 0), (10, 3))


def low_latency_or_skip() -> Any:
    """FlashInfer's low-latency kernel module, or a skip saying why it is unavailable."""
    flashinfer_or_skip()
    try:
        return importlib.import_module(LOW_LATENCY)
    except Exception as exc:
        pytest.skip(f"{LOW_LATENCY} is not importable here ({type(exc).__name__}: {exc})")


def ptxas_or_skip() -> Any:
    """The ptxas 13.5+ the resources extra installs, or a skip."""
    from fi_patches.tools.wide_resources import find_ptxas

    found = find_ptxas()
    if found is None:
        system = shutil.which("ptxas")
        hint = f" (a system ptxas at {system} is not used)" if system else ""
        pytest.skip(f"ptxas from nvidia-cuda-nvcc==13.5.37 is not installed{hint}")
    return found


def blackwell_or_skip() -> Any:
    """torch on an sm_100/sm_103 CUDA device, or a skip naming what is here instead."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs an sm_100/sm_103 CUDA device; torch sees no CUDA device")
    capability = torch.cuda.get_device_capability()
    if capability not in BLACKWELL:
        here = f"{torch.cuda.get_device_name()} (sm_{capability[0]}{capability[1]})"
        pytest.skip(f"needs an sm_100/sm_103 CUDA device; this is {here}")
    return torch


def cutlass_dtypes(dtypes: Any) -> tuple[Any, ...]:
    """``(a, b, sf, sf_vec, c)`` cutlass classes of a ``GemmDtypes``."""
    return dtypes.cutlass_types()


def mxfp8_operand(torch: Any, rows: int, k: int, seed: int) -> tuple[Any, Any, Any]:
    """E4M3 values (exact quarter-integers), E8M0 scales in the standard swizzled layout, and
    the dequantized float64 matrix (``fi_patches.chain.ops``, which ``validate`` ships)."""
    low_latency_or_skip()
    from fi_patches.chain.ops import mxfp8_operand as build

    return build(torch, rows, k, seed)
