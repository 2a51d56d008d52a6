"""Inputs shaped as ``mm_mxfp8`` hands them to its runners, for asking a runner which tactics
it offers. Only the activation is a real tensor, on the CUDA device when there is one (the
cute-dsl runner reads that device's SM count), and it holds one row; the rest are ``meta``
tensors, so checking a large problem allocates next to nothing."""

from __future__ import annotations

from typing import Any


def round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def mxfp8_runner_inputs(
    n: int, k: int, rows: int, out_dtype: Any = None, workspace_bytes: int = 1
) -> list[Any]:
    """``[a, b, a_scale, b_scale, out_dtype, out, workspace]`` for an MXFP8 GEMM of ``rows``
    activation rows and an ``(n, k)`` weight (``b`` is its column-major ``(k, n)`` view). The
    tuner's cache key holds the workspace size: pass ``mm_mxfp8``'s to build its keys."""
    import torch

    out_dtype = out_dtype or torch.bfloat16
    device = (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    )
    # One real row seen as ``rows`` (stride 0): runners read its shape and device, and a
    # large bucket must not allocate rows x K bytes on a serving GPU.
    a = torch.empty(1, k, dtype=torch.float8_e4m3fn, device=device).expand(rows, k)
    meta = torch.device("meta")
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device=meta).t()
    sf_k = round_up(k // 32, 4)
    a_scale = torch.empty(round_up(rows, 128) * sf_k, dtype=torch.uint8, device=meta)
    b_scale = torch.empty(round_up(n, 128) * sf_k, dtype=torch.uint8, device=meta)
    out = torch.empty(rows, n, dtype=out_dtype, device=meta)
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=meta)
    return [a, b, a_scale, b_scale, out_dtype, out, workspace]
