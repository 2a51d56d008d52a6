"""Everything fi_patches uses from vLLM, named once, in the boundary's form (see
:mod:`fi_patches.internals.flashinfer`): the releases the integration is verified on, each
internal with the features that need it, and the accessors the integration calls.

The layouts the route relies on, read from vLLM 0.34.0's
``vllm/model_executor/kernels/linear/mxfp8/flashinfer.py``: after
``process_weights_after_loading``, ``layer.weight`` is the column-major ``(K, N)`` view of an
``(N, K)`` E4M3 weight and ``layer.weight_scale`` its 1-D swizzled (128x4) E8M0 scales;
``apply_weights(layer, x, bias)`` takes a ``QuantizedActivation`` or a tensor it quantizes with
``mxfp8_e4m3_quantize(x.view(-1, K), is_sf_swizzled_layout=True)``, runs
``vllm.utils.flashinfer.mm_mxfp8(..., out_dtype=..., backend="cute-dsl")``, adds the bias and
views the result as ``(*x.shape[:-1], N)``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from fi_patches.internals import (
    ATTRIBUTE,
    CALLABLE,
    METHOD,
    MODULE,
    VLLM,
    Declared,
    Internal,
)
from fi_patches.internals import VLLM_PLUGIN as PLUGIN
from fi_patches.internals import VLLM_PLUGIN_DEVICES as PLUGIN_DEVICES
from fi_patches.internals import VLLM_ROUTE as ROUTE
from fi_patches.internals import VLLM_ROUTE_DEVICES as ROUTE_DEVICES

__all__ = ["PLUGIN", "PLUGIN_DEVICES", "ROUTE", "ROUTE_DEVICES", "VLLM"]


# --- the general plugin -------------------------------------------------------------------------

PLUGINS_MODULE = "vllm.plugins"
LOAD_GENERAL_PLUGINS = "load_general_plugins"
PLUGINS_GROUP_ATTRIBUTE = "DEFAULT_PLUGINS_GROUP"
GENERAL_PLUGINS_GROUP = "vllm.general_plugins"
"""The entry-point group vLLM loads in every process (and filters by ``VLLM_PLUGINS``)."""
ENTRY_POINT_NAME = "fi_patches"
ENTRY_POINT_VALUE = "fi_patches.vllm.plugin:register"
"""As pyproject.toml declares it."""

LOGGER = "vllm"
"""The logger vLLM configures (handler, level, format) when it builds its engine."""

PLUGIN_INTERNALS: tuple[Declared, ...] = (
    Internal("vllm_plugins", MODULE, PLUGINS_MODULE, "", (PLUGIN,)),
    Internal("load_general_plugins", CALLABLE, PLUGINS_MODULE, LOAD_GENERAL_PLUGINS, (PLUGIN,)),
    Internal("plugins_group", ATTRIBUTE, PLUGINS_MODULE, PLUGINS_GROUP_ATTRIBUTE, (PLUGIN,)),
)

# --- the cute-dsl MXFP8 linear kernel -----------------------------------------------------------

KERNEL_MODULE = "vllm.model_executor.kernels.linear.mxfp8.flashinfer"
KERNEL_CLASS = "FlashInferCutedslMxfp8LinearKernel"
APPLY_WEIGHTS = "apply_weights"
APPLY_WEIGHTS_PARAMS = ("layer", "x", "bias")
PROCESS_WEIGHTS = "process_weights_after_loading"
INPUT_QUANT_KEY = "input_quant_key"
LAYER_CONFIG = "Mxfp8LinearLayerConfig"
LAYER_CONFIG_MODULE = "vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel"
QUANT_ACTIVATION_MODULE = "vllm.model_executor.layers.fusion.quant_activation"
AS_QUANTIZED_ACTIVATION = "as_quantized_activation"
QUANTIZED_ACTIVATION = "QuantizedActivation"
MXFP8_UTILS_MODULE = "vllm.model_executor.layers.quantization.utils.mxfp8_utils"
MXFP8_QUANTIZE = "mxfp8_e4m3_quantize"
VLLM_FLASHINFER_MODULE = "vllm.utils.flashinfer"
VLLM_MM_MXFP8 = "mm_mxfp8"
"""vLLM's ``mm_mxfp8`` custom op (defined only where vLLM finds FlashInfer usable)."""
CUTE_DSL_BACKEND = "cute-dsl"


ROUTE_INTERNALS: tuple[Declared, ...] = (
    Internal("vllm_mxfp8_kernel_module", MODULE, KERNEL_MODULE, "", (ROUTE,)),
    Internal(
        "vllm_apply_weights",
        METHOD,
        KERNEL_MODULE,
        f"{KERNEL_CLASS}.{APPLY_WEIGHTS}",
        (ROUTE,),
        params=APPLY_WEIGHTS_PARAMS,
    ),
    Internal(
        "vllm_process_weights",
        METHOD,
        KERNEL_MODULE,
        f"{KERNEL_CLASS}.{PROCESS_WEIGHTS}",
        (ROUTE,),
        params=("layer",),
    ),
    Internal(
        "vllm_input_quant_key", METHOD, KERNEL_MODULE, f"{KERNEL_CLASS}.{INPUT_QUANT_KEY}", (ROUTE,)
    ),
    Internal(
        "vllm_layer_config",
        CALLABLE,
        LAYER_CONFIG_MODULE,
        LAYER_CONFIG,
        (ROUTE,),
        params=("weight_shape",),
    ),
    Internal(
        "vllm_as_quantized_activation",
        CALLABLE,
        QUANT_ACTIVATION_MODULE,
        AS_QUANTIZED_ACTIVATION,
        (ROUTE,),
        params=("x", "expected_key"),
    ),
    Internal(
        "vllm_quantized_activation",
        METHOD,
        QUANT_ACTIVATION_MODULE,
        f"{QUANTIZED_ACTIVATION}.__init__",
        (ROUTE,),
        params=("data", "scale", "orig_dtype", "orig_shape"),
    ),
    Internal(
        "vllm_mxfp8_quantize",
        CALLABLE,
        MXFP8_UTILS_MODULE,
        MXFP8_QUANTIZE,
        (ROUTE,),
        params=("x", "is_sf_swizzled_layout"),
    ),
    Internal("vllm_mm_mxfp8", CALLABLE, VLLM_FLASHINFER_MODULE, VLLM_MM_MXFP8, (ROUTE,)),
)

INTERNALS: tuple[Declared, ...] = PLUGIN_INTERNALS + ROUTE_INTERNALS
"""Every vLLM internal fi_patches uses."""

# --- the tuner cache layout ---------------------------------------------------------------------
# Read from vLLM's ``model_executor/warmup/flashinfer_autotune_cache.py``: without
# ``VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR`` the file is ``$VLLM_CACHE_ROOT/flashinfer_autotune_cache/
# <a>/<b>/<config hash>/autotune_configs.json``, where ``<a>/<b>`` are the last two parts of
# FlashInfer's JIT workspace directory: its version, then its target archs (FlashInfer 0.7.4's
# ``jit/env.py`` joins them by ``_``, each as the compute capability's digits with nvcc's suffix:
# ``90a``, ``103a``, ``120f``).

AUTOTUNE_CACHE_DIR = "flashinfer_autotune_cache"
"""The directory under ``VLLM_CACHE_ROOT`` holding ``<FlashInfer version>/<archs>/``."""
AUTOTUNE_FILE = "autotune_configs.json"
"""The v1 tuner file in each ``<config hash>`` directory."""
_ARCH_PART = re.compile(r"^(\d{2,3})[a-z]?$")


def workspace_archs(name: str) -> tuple[str, ...]:
    """The archs (``sm_103``) a FlashInfer workspace arch directory's name stands for: ``103a``
    is ``("sm_103",)``, ``90a_100a`` both; () for a name of another form."""
    parts = name.removeprefix("sm").lstrip("_").split("_")
    found = [_ARCH_PART.match(part) for part in parts]
    if not all(found):
        return ()
    return tuple(f"sm_{m.group(1)}" for m in found if m is not None)


# --- accessors ----------------------------------------------------------------------------------


def plugins_group() -> Any:
    """The group name vLLM's ``load_general_plugins`` reads."""
    return getattr(importlib.import_module(PLUGINS_MODULE), PLUGINS_GROUP_ATTRIBUTE)


def kernel_class() -> type:
    """vLLM's ``FlashInferCutedslMxfp8LinearKernel``."""
    cls: type = getattr(importlib.import_module(KERNEL_MODULE), KERNEL_CLASS)
    return cls


@dataclass(frozen=True)
class KernelApi:
    """What the routed ``apply_weights`` calls of vLLM, resolved once when the route installs."""

    as_quantized_activation: Callable[..., Any]
    quantize: Callable[..., Any]
    """``mxfp8_e4m3_quantize(x, is_sf_swizzled_layout=...)``."""
    flashinfer: ModuleType
    """``vllm.utils.flashinfer``: its ``mm_mxfp8`` is read at each call, as vLLM does."""

    def stock_mm(self, a: Any, b: Any, a_scale: Any, b_scale: Any, out_dtype: Any) -> Any:
        """The GEMM exactly as vLLM's own ``apply_weights`` issues it."""
        return self.flashinfer.mm_mxfp8(
            a, b, a_scale, b_scale, out_dtype=out_dtype, backend=CUTE_DSL_BACKEND
        )


def kernel_api() -> KernelApi:
    return KernelApi(
        as_quantized_activation=getattr(
            importlib.import_module(QUANT_ACTIVATION_MODULE), AS_QUANTIZED_ACTIVATION
        ),
        quantize=getattr(importlib.import_module(MXFP8_UTILS_MODULE), MXFP8_QUANTIZE),
        flashinfer=importlib.import_module(VLLM_FLASHINFER_MODULE),
    )
