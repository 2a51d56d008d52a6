"""vLLM's real ``FlashInferCutedslMxfp8LinearKernel`` on a CPU layer, set up by vLLM's own
``process_weights_after_loading``.

SIMULATION: the kernel's constructor asserts a CUDA sm_10x platform (``is_supported``); this
module answers vLLM's platform query in the kernel module as an sm_103 CUDA device would, for
one test (monkeypatch undoes it). Everything else is vLLM's code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import pytest
import torch

KERNEL_MODULE = "vllm.model_executor.kernels.linear.mxfp8.flashinfer"
KERNEL_CLASS = "FlashInferCutedslMxfp8LinearKernel"
N, K = 7168, 1536


class SimulatedSm103Platform:
    """What ``is_supported`` asks of vLLM's ``current_platform``."""

    def is_cuda(self) -> bool:
        return True

    def is_device_capability_family(self, capability: int, device_id: int = 0) -> bool:
        return capability == 100


def kernel_module() -> Any:
    return importlib.import_module(KERNEL_MODULE)


def kernel_class() -> Any:
    return getattr(kernel_module(), KERNEL_CLASS)


@dataclass
class Linear:
    kernel: Any
    layer: torch.nn.Module
    n: int
    k: int

    def apply(self, x: Any, bias: Any = None) -> Any:
        return self.kernel.apply_weights(self.layer, x, bias)


def linear(monkeypatch: pytest.MonkeyPatch, n: int = N, k: int = K) -> Linear:
    """The kernel vLLM builds for an ``(n, k)`` MXFP8 weight, with its layer after loading."""
    from vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel import (
        Mxfp8LinearLayerConfig,
    )

    monkeypatch.setattr(kernel_module(), "current_platform", SimulatedSm103Platform())
    kernel = kernel_class()(Mxfp8LinearLayerConfig(weight_shape=(n, k)))
    layer = torch.nn.Module()
    weight = torch.zeros(n, k, dtype=torch.float8_e4m3fn)
    scale = torch.full((n, k // 32), 127, dtype=torch.uint8)
    layer.register_parameter("weight", torch.nn.Parameter(weight, requires_grad=False))
    layer.register_parameter("weight_scale", torch.nn.Parameter(scale, requires_grad=False))
    layer.params_dtype = torch.bfloat16
    kernel.process_weights_after_loading(layer)
    return Linear(kernel, layer, n, k)


def quantized_activation(rows: int, k: int = K) -> Any:
    """A ``QuantizedActivation`` as a fused producer hands it to this kernel (vLLM's own
    quantization, swizzled scales, the kernel's quant key)."""
    from vllm.model_executor.layers.fusion.quant_activation import QuantizedActivation
    from vllm.model_executor.layers.quantization.utils.mxfp8_utils import mxfp8_e4m3_quantize
    from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp8Dynamic

    x = torch.zeros(rows, k, dtype=torch.bfloat16)
    data, scale = mxfp8_e4m3_quantize(x, is_sf_swizzled_layout=True)
    return QuantizedActivation(data, scale, torch.bfloat16, x.shape, kMxfp8Dynamic)
