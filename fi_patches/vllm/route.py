"""Routing of vLLM's ``FlashInferCutedslMxfp8LinearKernel.apply_weights`` through
:func:`fi_patches.mxfp8.mm`: a reversible patch of that one method (the lifecycle entry
:data:`ROUTE`), its GEMM, and the self-check that vLLM's kernel still works as the route assumes.

The replacement prepares the activation with vLLM's own helpers and layouts (a
``QuantizedActivation`` as it comes, or the tensor quantized by vLLM's ``mxfp8_e4m3_quantize``),
runs the GEMM (:func:`gemm`), then adds the bias and shapes the output as
vLLM's method does. It is armed by a post-import hook on vLLM's kernel module, so it applies
whenever vLLM imports it, once vLLM's version, probes and the device-free self-check pass. The
device (and FlashInfer) are checked at the first GEMM, in the process that runs it, so arming
never touches the GPU.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from fi_patches import startup
from fi_patches._logging import get_logger, log_once
from fi_patches.compat.features import NO_DEVICE, VLLM_ROUTE, check_dependency, status_of
from fi_patches.compat.target import Device
from fi_patches.internals import vllm as upstream
from fi_patches.patching import AttributePatch, Gate, PatchSet

logger = get_logger(__name__)

_lock = threading.RLock()
_armed = False
_arming = False
_patches: PatchSet | None = None
_outcome = "not armed"


# The GEMM of a routed linear: fi_patches.mxfp8.mm on the route it chooses, else vLLM's own
# mm_mxfp8(backend="cute-dsl"). Like vLLM's mm_mxfp8 it is a torch custom op
# (fi_patches::vllm_mxfp8_mm) while torch.compile traces the model, so the compiled graph holds
# one opaque node whose route is chosen when it runs, and a plain call in eager mode (no
# dispatcher cost per linear).

FEATURE = "vllm_route"
OP_NAME = "fi_patches::vllm_mxfp8_mm"
SCHEMA = "(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, ScalarType out_dtype) -> Tensor"

_gemm_lock = threading.Lock()
_definition: Any = None
"""The registered op (keeps it alive); ``_op`` is how calls reach it."""
_op: Any = None
_api: Any = None
_compiling: Any = None
_failed: set[tuple[Any, ...]] = set()
"""Problems whose routed GEMM raised: vLLM's own GEMM serves them from then on."""


def routed_mm(a: Any, b: Any, a_scale: Any, b_scale: Any, out_dtype: Any) -> Any:
    """``a @ b`` as vLLM's kernel hands it over: ``a`` ``(M, K)`` E4M3 with 1-D swizzled scales,
    ``b`` the column-major ``(K, N)`` weight with its swizzled scales; ``(M, N)`` out.

    Raises only what vLLM's own GEMM raises: a failure of the routed GEMM is logged once and
    that problem goes back to vLLM's GEMM for the rest of the process.
    """
    api = _api
    record = status_of(FEATURE)
    if not record.enabled:
        log_once(
            logger,
            logging.INFO,
            "disabled",
            "vLLM's cute-dsl MXFP8 linears keep vLLM's own GEMM: %s",
            record.reason,
        )
        return api.stock_mm(a, b, a_scale, b_scale, out_dtype)
    key = (b.shape[1], b.shape[0], a.shape[0], out_dtype)
    if key not in _failed:
        from fi_patches.mxfp8 import mm

        try:
            return mm(a, b, b_scale, x_scale=a_scale, out_dtype=out_dtype, stock_backend="cute-dsl")
        except Exception as exc:
            with _gemm_lock:
                _failed.add(key)
            log_once(
                logger,
                logging.WARNING,
                f"failed:{key}",
                "routing vLLM's MXFP8 GEMM n=%d k=%d rows=%d failed (%s: %s); vLLM's own "
                "mm_mxfp8(backend='cute-dsl') serves this problem from now on",
                key[0],
                key[1],
                key[2],
                type(exc).__name__,
                exc,
            )
    return api.stock_mm(a, b, a_scale, b_scale, out_dtype)


def gemm(a: Any, b: Any, a_scale: Any, b_scale: Any, out_dtype: Any) -> Any:
    """:func:`routed_mm`, through the custom op while torch.compile traces (after
    :func:`prepare`)."""
    if _compiling():
        return _op(a, b, a_scale, b_scale, out_dtype)
    return routed_mm(a, b, a_scale, b_scale, out_dtype)


def prepare(api: Any) -> None:
    """Register the custom op (once per process) and keep vLLM's callables for the GEMM."""
    global _definition, _op, _api, _compiling
    import torch

    with _gemm_lock:
        _api = api
        if _op is not None:
            return
        _compiling = torch.compiler.is_compiling

        def vllm_mxfp8_mm(a: Any, b: Any, a_scale: Any, b_scale: Any, out_dtype: Any) -> Any:
            return routed_mm(a, b, a_scale, b_scale, out_dtype)

        def fake(a: Any, b: Any, a_scale: Any, b_scale: Any, out_dtype: Any) -> Any:
            return torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device=a.device)

        _definition = torch.library.custom_op(
            OP_NAME, vllm_mxfp8_mm, mutates_args=(), schema=SCHEMA
        )
        _definition.register_fake(fake)
        _op = torch.ops.fi_patches.vllm_mxfp8_mm


def forget() -> None:
    """Route problems whose routed GEMM failed again (``fi_patches.refresh()`` calls this,
    through :data:`ROUTE`)."""
    with _gemm_lock:
        _failed.clear()


# The route's behavioural self-check, run by the compat layer after the probes pass.

_N, _K = 256, 512
_BLOCK = 32


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
    output = gemm(a, layer.weight, a_scale, layer.weight_scale, out_dtype)
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
            prepare(api)
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
                startup.when_imported(upstream.KERNEL_MODULE, _on_import)
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


class _Route:
    """The route's lifecycle entry: instrumenting arms it (:func:`arm`), uninstrumenting puts
    vLLM's exact original method back (:func:`remove`), refreshing forgets the failed problems
    (:func:`forget`)."""

    name = "vllm_route"

    @property
    def installed(self) -> bool:
        return _patches is not None

    def instrument(self) -> str:
        return arm()

    def uninstrument(self) -> None:
        remove()

    def refresh(self) -> None:
        forget()


ROUTE = _Route()
