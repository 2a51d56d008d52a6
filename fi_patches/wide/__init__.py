"""Wide activation tiles (16-128 rows) for FlashInfer's low-latency block-scaled GEMM.

FlashInfer offers ``LowLatencyBlockscaledGemmKernel`` only with an 8-row activation tile, but
its body works for any multiple of 8 up to 128; wider tiles keep its PDL behaviour (weight
loads never wait on the previous kernel). This package supplies the honest host side:
shared-memory and TMEM budgets, a validity check that names the limit, a tactic enumerator,
a cached compiler and launch helpers. Its PTX checks (:mod:`fi_patches.wide.ptx`) are
verification: the CLI, the tests and the compat matrix run them, a serving process only on a
release off the matrix. Its resource reports are tooling (:mod:`fi_patches.tools.wide_resources`).

``import fi_patches.wide`` imports neither torch, cutlass nor FlashInfer; the names below
load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fi_patches._lazy import lazy_exports

_EXPORTS = {
    "GemmDtypes": "fi_patches.wide.budget",
    "MXFP8": "fi_patches.wide.budget",
    "NVFP4": "fi_patches.wide.budget",
    "Tactic": "fi_patches.wide.tactics",
    "smem_bytes": "fi_patches.wide.budget",
    "smem_capacity": "fi_patches.wide.budget",
    "tmem_columns": "fi_patches.wide.budget",
    "invalid_reason": "fi_patches.wide.budget",
    "config_reason": "fi_patches.wide.budget",
    "wide_tactics": "fi_patches.wide.tactics",
    "default_tactic": "fi_patches.wide.tactics",
    "wide_kernel_class": "fi_patches.wide.kernel",
    "resolve_arch": "fi_patches.wide.budget",
    "WideArchError": "fi_patches.wide.budget",
    "compile_wide": "fi_patches.wide.kernel",
    "WideConfigError": "fi_patches.wide.kernel",
    "WideKernel": "fi_patches.wide.kernel",
    "launch_wide": "fi_patches.wide.launch",
    "pick_tile": "fi_patches.wide.tactics",
    "choose_tactic": "fi_patches.wide.tactics",
    "wide_mm": "fi_patches.wide.launch",
    "repack_per_cta": "fi_patches.wide.launch",
    "wide_pin_reason": "fi_patches.wide.tactics",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fi_patches.wide.budget import MXFP8 as MXFP8
    from fi_patches.wide.budget import NVFP4 as NVFP4
    from fi_patches.wide.budget import GemmDtypes as GemmDtypes
    from fi_patches.wide.budget import WideArchError as WideArchError
    from fi_patches.wide.budget import config_reason as config_reason
    from fi_patches.wide.budget import invalid_reason as invalid_reason
    from fi_patches.wide.budget import resolve_arch as resolve_arch
    from fi_patches.wide.budget import smem_bytes as smem_bytes
    from fi_patches.wide.budget import smem_capacity as smem_capacity
    from fi_patches.wide.budget import tmem_columns as tmem_columns
    from fi_patches.wide.kernel import WideConfigError as WideConfigError
    from fi_patches.wide.kernel import WideKernel as WideKernel
    from fi_patches.wide.kernel import compile_wide as compile_wide
    from fi_patches.wide.kernel import wide_kernel_class as wide_kernel_class
    from fi_patches.wide.launch import launch_wide as launch_wide
    from fi_patches.wide.launch import repack_per_cta as repack_per_cta
    from fi_patches.wide.launch import wide_mm as wide_mm
    from fi_patches.wide.tactics import Tactic as Tactic
    from fi_patches.wide.tactics import choose_tactic as choose_tactic
    from fi_patches.wide.tactics import default_tactic as default_tactic
    from fi_patches.wide.tactics import pick_tile as pick_tile
    from fi_patches.wide.tactics import wide_pin_reason as wide_pin_reason
    from fi_patches.wide.tactics import wide_tactics as wide_tactics


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
