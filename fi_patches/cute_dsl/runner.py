"""FlashInfer's ``cute-dsl`` MXFP8 runner as ``mm_mxfp8`` builds it, one per device and output
dtype (0.7.4 caches its factory; earlier releases build a new runner per call)."""

from __future__ import annotations

import functools
import importlib
from typing import Any

from fi_patches.pinning.targets import CUTE_DSL_FACTORY, GEMM_BASE


@functools.lru_cache(maxsize=32)
def cute_dsl_runner(sm_major: int, sm_minor: int, out_dtype: Any) -> Any:
    """The runner ``mm_mxfp8(backend="cute-dsl")`` tunes, with PDL, for ``out_dtype``."""
    gemm_base = importlib.import_module(GEMM_BASE)
    return getattr(gemm_base, CUTE_DSL_FACTORY)(sm_major, sm_minor, True, out_dtype)


_WORKSPACE_HELPERS = (
    (GEMM_BASE, "_get_stream_cache_buf"),  # 0.7.4: per device and stream
    (GEMM_BASE, "_get_cache_buf"),  # 0.6.x-0.7.2.post1: what mm_mxfp8 calls
    ("flashinfer.utils", "_get_cache_buf"),  # where it is defined in every release
)


def workspace_helper() -> tuple[str, Any]:
    """``(dotted name, function)`` of the workspace helper ``mm_mxfp8`` uses on this release."""
    for module, name in _WORKSPACE_HELPERS:
        helper = getattr(importlib.import_module(module), name, None)
        if helper is not None:
            return f"{module}.{name}", helper
    raise LookupError("this FlashInfer has no workspace helper fi_patches knows")


def workspace(device: Any) -> Any:
    """``mm_mxfp8``'s own workspace buffer for ``device`` (the size is part of the tuner's key)."""
    gemm_base = importlib.import_module(GEMM_BASE)
    _, helper = workspace_helper()
    return helper("mm_mxfp8_workspace", gemm_base.DEFAULT_WORKSPACE_SIZE, device)
