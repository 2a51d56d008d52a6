"""Behavioural self-checks of the vLLM features, run by the compat layer after the probes pass:
the plugin is what vLLM will load, and vLLM's cute-dsl MXFP8 kernel still lays out its weights
and issues its GEMM as the route assumes."""

from __future__ import annotations

import inspect
from typing import Any

from fi_patches.compat.target import Device
from fi_patches.host_plugin import entry_point_problem
from fi_patches.internals import vllm as upstream

_N, _K = 256, 512
_BLOCK = 32


def plugin_self_check(device: Device) -> str | None:
    """vLLM reads the group fi_patches' entry point is in, and that entry point is installed."""
    group = upstream.plugins_group()
    if group != upstream.GENERAL_PLUGINS_GROUP:
        return f"vLLM loads general plugins from {group!r}, not {upstream.GENERAL_PLUGINS_GROUP!r}"
    return entry_point_problem(
        upstream.GENERAL_PLUGINS_GROUP, upstream.ENTRY_POINT_NAME, upstream.ENTRY_POINT_VALUE
    )


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def route_self_check(device: Device) -> str | None:
    """vLLM's own ``process_weights_after_loading`` leaves the layouts ``fi_patches.mxfp8.mm``
    takes, and ``apply_weights`` still issues ``mm_mxfp8(backend="cute-dsl")``."""
    import torch

    cls = upstream.kernel_class()
    method = vars(cls).get(upstream.APPLY_WEIGHTS)
    # vLLM's own method, also while fi_patches' route (which wraps it) is installed
    code = getattr(inspect.unwrap(method), "__code__", None) if method else None
    if code is None:
        return f"{upstream.KERNEL_CLASS} no longer defines {upstream.APPLY_WEIGHTS} itself"
    if upstream.VLLM_MM_MXFP8 not in code.co_names or upstream.CUTE_DSL_BACKEND not in (
        code.co_consts
    ):
        return (
            f"{upstream.KERNEL_CLASS}.{upstream.APPLY_WEIGHTS} no longer calls "
            f"{upstream.VLLM_MM_MXFP8}(backend={upstream.CUTE_DSL_BACKEND!r})"
        )
    layer = torch.nn.Module()
    weight = torch.zeros(_N, _K, dtype=torch.float8_e4m3fn)
    scale = torch.zeros(_N, _K // _BLOCK, dtype=torch.uint8)
    layer.register_parameter("weight", torch.nn.Parameter(weight, requires_grad=False))
    layer.register_parameter("weight_scale", torch.nn.Parameter(scale, requires_grad=False))
    # __init__ asserts a CUDA sm_10x platform; the layout step does not need one.
    kernel: Any = object.__new__(cls)
    getattr(kernel, upstream.PROCESS_WEIGHTS)(layer)
    w: Any = layer.weight
    s: Any = layer.weight_scale
    if tuple(w.shape) != (_K, _N) or w.stride() != (1, _K) or w.dtype != torch.float8_e4m3fn:
        return (
            f"its weight after loading is {tuple(w.shape)} {w.dtype} with strides {w.stride()}, "
            f"not the column-major ({_K}, {_N}) E4M3 view mm_mxfp8 takes"
        )
    size = _round_up(_N, 128) * _round_up(_K // _BLOCK, 4)
    if s.dim() != 1 or s.numel() != size or s.dtype != torch.uint8:
        return (
            f"its weight scales after loading are {tuple(s.shape)} {s.dtype}, not the "
            f"1-D swizzled {size} uint8 mm_mxfp8 takes"
        )
    return None
