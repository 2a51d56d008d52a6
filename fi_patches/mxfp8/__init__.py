"""The MXFP8 projection entry point: ``mm`` routes each GEMM to the low-latency backend, the
wide kernel, a pinned cute-dsl tactic or stock ``mm_mxfp8``; ``explain`` says which and why."""

from fi_patches.mxfp8.mm import mm
from fi_patches.mxfp8.routes import Choice, Route, explain

__all__ = ["Choice", "Route", "explain", "mm"]
