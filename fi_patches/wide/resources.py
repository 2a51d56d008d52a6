"""Registers, stack, spills and shared memory of a compiled wide kernel, from the DSL's own
cubin, ptxas ``-v`` on its PTX (when ptxas 13.5+ is installed) and the launch configuration in
its host code, so a precompile step can report and budget every kernel it builds."""

from __future__ import annotations

from dataclasses import dataclass

from fi_patches._logging import get_logger
from fi_patches.wide.compiled import WideKernel
from fi_patches.wide.cubin import read_cubin
from fi_patches.wide.hostir import launch_dynamic_smem
from fi_patches.wide.ptxas import PtxasError, PtxasReport, find_ptxas, run_ptxas
from fi_patches.wide.smem import smem_bytes
from fi_patches.wide.tactic import Tactic

logger = get_logger(__name__)


@dataclass(frozen=True)
class KernelResources:
    """Resource figures of one compiled wide kernel; None where the source was unavailable."""

    tile: int
    tactic: Tactic
    arch: str
    kernel_name: str | None
    registers: int | None
    """From ptxas when it ran, else from the cubin's REGCOUNT (the two agree)."""
    stack_frame_bytes: int | None
    spill_store_bytes: int | None
    """ptxas only (the cubin does not record spills)."""
    spill_load_bytes: int | None
    static_smem_bytes: int | None
    launch_dynamic_smem_bytes: int | None
    """What the launch requests (from the host code): the number checked against capacity."""
    formula_smem_bytes: int
    """:func:`fi_patches.wide.smem.smem_bytes` for the same configuration."""
    cubin_sm: int | None
    cubin_registers: int | None
    cubin_frame_size: int | None
    ptxas_version: str | None
    compile_seconds: float

    @property
    def spills(self) -> bool | None:
        if self.spill_store_bytes is None or self.spill_load_bytes is None:
            return None
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


def _ptxas_report(kernel: WideKernel, use_ptxas: bool | None) -> PtxasReport | None:
    if use_ptxas is False or kernel.ptx is None:
        if use_ptxas and kernel.ptx is None:
            raise PtxasError("the kernel was compiled without keeping its PTX")
        return None
    if use_ptxas is None and find_ptxas() is None:
        return None
    reports, _ = run_ptxas(kernel.ptx, kernel.arch)
    return reports[0] if reports else None


def kernel_resources(kernel: WideKernel, *, use_ptxas: bool | None = None) -> KernelResources:
    """Resources of ``kernel``; ``use_ptxas`` None runs ptxas when it is installed, True
    requires it (PtxasError when missing), False never runs it."""
    report = _ptxas_report(kernel, use_ptxas)
    cubin_kernel = None
    cubin_sm = None
    if kernel.cubin is not None:
        info = read_cubin(kernel.cubin)
        cubin_sm = info.sm
        cubin_kernel = next(iter(info.kernels.values()), None)
    launches = launch_dynamic_smem(kernel.host_ir())
    if len(launches) != 1:
        logger.debug("expected one launch in the host code of %s, found %s", kernel.key, launches)
    cubin_regs = cubin_kernel.registers if cubin_kernel else None
    cubin_frame = cubin_kernel.frame_size if cubin_kernel else None
    return KernelResources(
        tile=kernel.tile,
        tactic=kernel.tactic,
        arch=kernel.arch,
        kernel_name=report.kernel if report else (cubin_kernel.name if cubin_kernel else None),
        registers=report.registers if report else cubin_regs,
        stack_frame_bytes=report.stack_frame_bytes if report else cubin_frame,
        spill_store_bytes=report.spill_store_bytes if report else None,
        spill_load_bytes=report.spill_load_bytes if report else None,
        static_smem_bytes=report.static_smem_bytes if report else None,
        launch_dynamic_smem_bytes=launches[0] if len(launches) == 1 else None,
        formula_smem_bytes=smem_bytes(kernel.tile, *kernel.tactic, dtypes=kernel.key.dtypes),
        cubin_sm=cubin_sm,
        cubin_registers=cubin_regs,
        cubin_frame_size=cubin_frame,
        ptxas_version=report.ptxas_version if report else None,
        compile_seconds=kernel.compile_seconds,
    )
