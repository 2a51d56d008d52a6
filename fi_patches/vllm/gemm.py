"""The GEMM of vLLM's routed cute-dsl MXFP8 linear: :func:`fi_patches.mxfp8.mm` on the route it
chooses, else vLLM's own ``mm_mxfp8(backend="cute-dsl")``.

Like vLLM's own ``mm_mxfp8``, it is a torch custom op (``fi_patches::vllm_mxfp8_mm``) while
torch.compile traces the model, so the compiled graph holds one opaque node whose route is chosen
when it runs, and a plain call in eager mode (no dispatcher cost per linear).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.evaluate import on_refresh, status_of

logger = get_logger(__name__)

FEATURE = "vllm_route"
OP_NAME = "fi_patches::vllm_mxfp8_mm"
SCHEMA = "(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, ScalarType out_dtype) -> Tensor"

_lock = threading.Lock()
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
            with _lock:
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

    with _lock:
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


@on_refresh
def forget() -> None:
    """Route problems whose routed GEMM failed again (``fi_patches.refresh()`` calls this)."""
    with _lock:
        _failed.clear()
