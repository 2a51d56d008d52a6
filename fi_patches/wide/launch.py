"""Launch a compiled wide kernel on torch tensors, on the current CUDA stream.

Kernel convention: kernel M is the weight's N (output features), kernel N the activation rows;
A = weight ``(N, K)`` K-major with its 128x4 swizzled scales (SFA), B = activation ``(rows, K)``
K-major with its scales (SFB), C = ``out.T`` (M-major), so ``out`` is ``(rows, N)`` row-major.
"""

from __future__ import annotations

from typing import Any

from fi_patches.wide.compile import POINTER_ALIGN, WideConfigError
from fi_patches.wide.compiled import WideKernel
from fi_patches.wide.scales import per_cta_scale_elements, standard_scale_elements
from fi_patches.wide.validity import invalid_reason

FP8_TORCH = "float8_e4m3fn"
SCALE_TORCH = ("uint8", "float8_e8m0fnu")
OUT_TORCH = {"BFloat16": "bfloat16", "Float16": "float16", "Float32": "float32"}


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def check_launch_inputs(
    kernel: WideKernel,
    weight: Any,
    weight_scale: Any,
    a: Any,
    a_scale: Any,
    out: Any,
    *,
    a_scale_per_cta: bool = False,
) -> tuple[int, int, int]:
    """Validate shapes, types, layouts, alignment and the tile contract; ``(N, rows, K)``."""
    _require(kernel.key.dtypes.sf_vec == 32, "launch_wide runs MXFP8 kernels only")
    _require(weight.dim() == 2 and a.dim() == 2, "weight is (N, K) and a is (rows, K)")
    n, k = weight.shape
    rows, k_a = a.shape
    _require(k == k_a, f"weight K {k} != activation K {k_a}")
    for name, tensor in (("weight", weight), ("a", a)):
        _require(_dtype_name(tensor) == FP8_TORCH, f"{name} must be {FP8_TORCH}")
        _require(tensor.is_contiguous(), f"{name} must be row-major (K-major) contiguous")
    for name, tensor in (("weight_scale", weight_scale), ("a_scale", a_scale)):
        _require(_dtype_name(tensor) in SCALE_TORCH, f"{name} must be one of {SCALE_TORCH}")
        _require(tensor.is_contiguous(), f"{name} must be contiguous")
    out_name = OUT_TORCH.get(kernel.key.dtypes.c)
    _require(_dtype_name(out) == out_name, f"out must be {out_name} for this kernel")
    _require(tuple(out.shape) == (rows, n), f"out must be (rows, N) = {(rows, n)}")
    _require(out.is_contiguous(), "out must be contiguous (C = out.T is M-major)")
    need_w = standard_scale_elements(n, k)
    _require(weight_scale.numel() >= need_w, f"weight_scale needs {need_w} elements")
    need_a = (
        per_cta_scale_elements(rows, k, kernel.tile)
        if a_scale_per_cta
        else standard_scale_elements(rows, k)
    )
    _require(a_scale.numel() >= need_a, f"a_scale needs {need_a} elements")
    device = weight.device
    others = (("weight_scale", weight_scale), ("a", a), ("a_scale", a_scale), ("out", out))
    for name, tensor in others:
        _require(tensor.device == device, f"{name} is on {tensor.device}, weight on {device}")
    _require(device.type == "cuda", "wide kernels run on CUDA tensors")
    aligned = (
        ("weight", weight, POINTER_ALIGN["a"]),
        ("weight_scale", weight_scale, POINTER_ALIGN["sfa"]),
        ("a", a, POINTER_ALIGN["b"]),
        ("a_scale", a_scale, POINTER_ALIGN["sfb"]),
        ("out", out, POINTER_ALIGN["c"]),
    )
    for name, tensor, align in aligned:
        _require(tensor.data_ptr() % align == 0, f"{name} must be {align}-byte aligned")
    reason = invalid_reason(
        (n, rows, k, 1),
        kernel.tile,
        kernel.tactic,
        kernel.key.dtypes,
        sfb_per_cta_packed=a_scale_per_cta,
        arch=kernel.arch,
    )
    if reason is not None:
        raise WideConfigError(f"{kernel.key} cannot run N={n} rows={rows} K={k}: {reason}")
    return n, rows, k


def launch_wide(
    kernel: WideKernel,
    weight: Any,
    weight_scale: Any,
    a: Any,
    a_scale: Any,
    out: Any,
    *,
    a_scale_per_cta: bool = False,
) -> Any:
    """Run ``out = a @ weight.T`` (block-scaled) with ``kernel`` on the current stream; returns
    ``out``. ``a_scale_per_cta`` says ``a_scale`` is in the per-CTA layout (see
    :mod:`fi_patches.wide.scales`); otherwise it must be standard and rows <= tile."""
    import cuda.bindings.driver as cuda_driver
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import make_ptr

    n, rows, k = check_launch_inputs(
        kernel, weight, weight_scale, a, a_scale, out, a_scale_per_cta=a_scale_per_cta
    )
    a_t, b_t, sf_t, _, c_t = kernel.key.dtypes.cutlass_types()

    def ptr(dtype: Any, tensor: Any, role: str) -> Any:
        return make_ptr(
            dtype, tensor.data_ptr(), cute.AddressSpace.gmem, assumed_align=POINTER_ALIGN[role]
        )

    with torch.cuda.device(weight.device):
        stream = cuda_driver.CUstream(torch.cuda.current_stream(weight.device).cuda_stream)
        kernel(
            ptr(a_t, weight, "a"),
            ptr(sf_t, weight_scale, "sfa"),
            ptr(b_t, a, "b"),
            ptr(sf_t, a_scale, "sfb"),
            ptr(c_t, out, "c"),
            None,
            None,
            tuple(cutlass.Int32(v) for v in (n, rows, k, 1)),
            stream,
        )
    return out
