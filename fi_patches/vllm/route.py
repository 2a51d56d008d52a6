"""Routing of vLLM's ``FlashInferCutedslMxfp8LinearKernel.apply_weights`` through
:func:`fi_patches.mxfp8.mm`: a reversible patch of that one method.

The replacement prepares the activation with vLLM's own helpers and layouts (a
``QuantizedActivation`` as it comes, or the tensor quantized by vLLM's ``mxfp8_e4m3_quantize``),
runs the GEMM through :mod:`fi_patches.vllm.gemm`, then adds the bias and shapes the output as
vLLM's method does. It is armed by a post-import hook on vLLM's kernel module, so it applies
whenever vLLM imports it, once vLLM's version, probes and the device-free self-check pass. The
device (and FlashInfer) are checked at the first GEMM, in the process that runs it, so arming
never touches the GPU.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from fi_patches import _import_hooks
from fi_patches._logging import get_logger, log_once
from fi_patches.compat.evaluate import NO_DEVICE, check_dependency
from fi_patches.features import VLLM_ROUTE
from fi_patches.internals import vllm as upstream
from fi_patches.patching import AttributePatch, Gate, PatchSet
from fi_patches.vllm import gemm
from fi_patches.vllm.self_check import route_self_check

logger = get_logger(__name__)

_lock = threading.RLock()
_armed = False
_arming = False
_patches: PatchSet | None = None
_outcome = "not armed"


def _make(api: upstream.KernelApi) -> Callable[[Any, Gate], Callable[..., Any]]:
    """The replacement's factory for :class:`AttributePatch`."""

    import torch

    compiling = torch.compiler.is_compiling

    def make(original: Callable[..., Any], gate: Gate) -> Callable[..., Any]:
        def apply_weights(self: Any, layer: Any, x: Any, bias: Any = None) -> Any:
            if not gate.active:
                return original(self, layer, x, bias)
            if compiling():
                return _routed(api, self, layer, x, bias)
            try:
                prepared = _prepare(api, self, layer, x)
            except Exception as exc:  # vLLM's own method answers (and raises what it raises)
                log_once(
                    logger,
                    logging.WARNING,
                    f"prepare:{type(exc).__name__}",
                    "routing vLLM's MXFP8 linear fell back to vLLM's apply_weights (%s: %s)",
                    type(exc).__name__,
                    exc,
                )
                return original(self, layer, x, bias)
            return _finish(prepared, layer, bias)

        apply_weights.__qualname__ = f"{upstream.KERNEL_CLASS}.{upstream.APPLY_WEIGHTS}"
        apply_weights.__doc__ = f"fi_patches' routing of {original.__qualname__}."
        apply_weights.__wrapped__ = original  # type: ignore[attr-defined]  # probes see vLLM's
        return apply_weights

    return make


def _prepare(api: upstream.KernelApi, kernel: Any, layer: Any, x: Any) -> tuple[Any, ...]:
    """The activation as vLLM's method quantizes it, its output dtype and shape."""
    k, n = layer.weight.shape
    qa = api.as_quantized_activation(x, kernel.input_quant_key())
    if qa is not None:
        a, a_scale, out_dtype, shape = qa.data, qa.scale, qa.orig_dtype, qa.orig_shape
    else:
        out_dtype, shape = layer.params_dtype, x.shape
        a, a_scale = api.quantize(x.view(-1, k), is_sf_swizzled_layout=True)
    return a, a_scale, out_dtype, (*shape[:-1], n)


def _finish(prepared: tuple[Any, ...], layer: Any, bias: Any) -> Any:
    a, a_scale, out_dtype, out_shape = prepared
    output = gemm.gemm(a, layer.weight, a_scale, layer.weight_scale, out_dtype)
    if bias is not None:
        output = output + bias
    return output.view(out_shape)


def _routed(api: upstream.KernelApi, kernel: Any, layer: Any, x: Any, bias: Any) -> Any:
    """The traced form (torch.compile): the same steps, without the eager fallback."""
    return _finish(_prepare(api, kernel, layer, x), layer, bias)


def install() -> str:
    """Patch vLLM's kernel class now (the probes import its module) if vLLM is verified, has
    every internal and passes the self-check; returns what happened, in a sentence. Never
    raises."""
    global _patches, _outcome
    with _lock:
        if _patches is not None:
            return _outcome
        try:
            # The vllm_route feature's gates that need no device (the device, and FlashInfer,
            # are checked at the first GEMM, in the process that runs it).
            problem = check_dependency(VLLM_ROUTE, upstream.VLLM).problem
            if problem is None:
                failed = route_self_check(NO_DEVICE)
                problem = f"self-check failed: {failed}." if failed else None
            if problem is not None:
                _outcome = f"routing off: {problem}"
                return _outcome
            api = upstream.kernel_api()
            gemm.prepare(api)
            patches = PatchSet(
                [AttributePatch(upstream.kernel_class(), upstream.APPLY_WEIGHTS, _make(api))]
            )
            patches.apply()
        except Exception as exc:
            _outcome = f"routing off: {type(exc).__name__}: {exc}"
            return _outcome
        _patches = patches
        _outcome = f"routing {upstream.KERNEL_CLASS} through fi_patches.mxfp8.mm"
        return _outcome


def _on_import(module: Any) -> None:
    """The post-import hook on vLLM's kernel module (never raises into vLLM's import)."""
    outcome = install()
    if _arming:
        return  # arm() reports it in the plugin's line
    level = logging.DEBUG if _patches is not None else logging.WARNING
    log_once(logger, level, f"install:{outcome}", "fi_patches vLLM plugin: %s", outcome)


def arm() -> str:
    """Install the route when vLLM imports its kernel module (now, if it has); returns what
    happened so far, in a sentence. Idempotent; after :func:`remove` it installs again."""
    global _armed, _arming
    with _lock:
        if not _armed:
            _armed, _arming = True, True
            try:  # the hook runs at once when the module is already imported
                _import_hooks.when_imported(upstream.KERNEL_MODULE, _on_import)
            finally:
                _arming = False
        elif _patches is None and upstream.KERNEL_MODULE in sys.modules:
            install()
        if _patches is None and upstream.KERNEL_MODULE not in sys.modules:
            return "routing armed (applies when vLLM imports its cute-dsl MXFP8 kernel)"
        return _outcome


def remove() -> None:
    """Take the patch off: vLLM's exact original method is back on the class."""
    global _patches, _outcome
    with _lock:
        if _patches is not None:
            _patches.revert()
            _patches = None
            _outcome = "routing removed"


def state() -> str:
    """``on`` (vLLM's method is patched), ``armed`` (it will be once vLLM imports its kernel
    module) or ``off``: the rank guard compares it, as a routed rank tunes other runners."""
    if _patches is not None:
        return "on"
    return "armed" if _armed and upstream.KERNEL_MODULE not in sys.modules else "off"


def outcome() -> str:
    """What the route did, in a sentence."""
    return _outcome
