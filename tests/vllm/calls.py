"""Which real FlashInfer and fi_patches functions a call enters, in order, observed with
``sys.setprofile`` (nothing is replaced): the route a GEMM took, up to the kernel launch."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from fi_patches.pins.keys import as_tactic as nested_tuple

GEMM_BASE = "flashinfer.gemm.gemm_base"


def _tactic(frame: FrameType) -> Any:
    tactic = frame.f_locals.get("tactic")
    return nested_tuple(tactic) if isinstance(tactic, (list, tuple)) else tactic


# (module, function name) -> how to describe an entry into it
_WATCHED: dict[tuple[str, str], Callable[[FrameType], str]] = {
    (GEMM_BASE, "mm_mxfp8"): lambda f: f"mm_mxfp8(backend={f.f_locals.get('backend')!r})",
    ("fi_patches.wide.kernel", "compile_wide"): lambda f: (
        f"compile_wide(tile={f.f_locals.get('tile')})"
    ),
    # mxfp8.mm's wide route runs the shape's launch plan on mm_mxfp8's weight view.
    ("fi_patches.wide.launch", "run_column_major"): lambda f: (
        f"launch_wide(tile={f.f_locals['self'].kernel.tile}, "
        f"tactic={tuple(f.f_locals['self'].kernel.tactic)})"
    ),
    # mxfp8.mm's pinned route enters pinned_mm_with (the tables already resolved), a direct
    # caller pinned_mm: either is the pinned cute-dsl route.
    ("fi_patches.cute_dsl", "pinned_mm_with"): lambda f: "pinned_mm",
    ("vllm.utils.flashinfer", "_mm_mxfp8"): lambda f: (
        f"vllm mm_mxfp8(backend={f.f_locals.get('backend')!r})"
    ),
    ("vllm.model_executor.layers.quantization.utils.mxfp8_utils", "mxfp8_e4m3_quantize"): (
        lambda f: "vllm mxfp8_e4m3_quantize"
    ),
}


def _describe(frame: FrameType) -> str | None:
    code = frame.f_code
    module = frame.f_globals.get("__name__", "")
    describe = _WATCHED.get((module, code.co_name))
    if describe is not None:
        return describe(frame)
    if module == GEMM_BASE and code.co_name == "forward" and "Runner" in code.co_qualname:
        runner = code.co_qualname.split(".")[-2]
        return f"{runner}.forward(tactic={_tactic(frame)!r})"
    return None


@contextmanager
def recording() -> Iterator[list[str]]:
    """The watched functions entered inside the block, in order (this thread only)."""
    seen: list[str] = []
    thread = threading.get_ident()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and threading.get_ident() == thread:
            described = _describe(frame)
            if described is not None:
                seen.append(described)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
