"""A compiled wide kernel's resources: registers, spills and stack from ptxas (or the cubin), and
the dynamic shared memory its launch requests, read from the lowered host IR."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fi_patches._logging import get_logger
from fi_patches.wide.budget import smem_bytes
from fi_patches.wide.compile import WideKernel
from fi_patches.wide.cubin import read_cubin
from fi_patches.wide.ptxas import PtxasError, PtxasReport, find_ptxas, run_ptxas
from fi_patches.wide.tactics import Tactic

_LAUNCH_CONFIG = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"
"""LLVM type of ``cudaLaunchConfig_t``: grid, block, dynamicSmemBytes, stream, attrs, count."""

_DYNAMIC_SMEM_FIELD = 2
_FUNC = re.compile(r"^\s*llvm\.func\b", re.MULTILINE)


def _functions(ir: str) -> list[str]:
    starts = [m.start() for m in _FUNC.finditer(ir)]
    return [ir[a:b] for a, b in zip(starts, [*starts[1:], len(ir)], strict=True)]


def launch_dynamic_smem(ir: str) -> list[int]:
    """Dynamic shared-memory bytes of every kernel launch in lowered host IR ``ir`` (``str`` of
    a compiled function's ``ir_module``), in order; a launch whose value is not a constant is
    left out."""
    found: list[int] = []
    for body in _functions(ir):
        for config in re.findall(
            rf"(%\d+) = llvm\.alloca %\d+ x {re.escape(_LAUNCH_CONFIG)}", body
        ):
            field_ptrs = re.findall(
                rf"(%\d+) = llvm\.getelementptr {re.escape(config)}\[0, {_DYNAMIC_SMEM_FIELD}\]",
                body,
            )
            for field_ptr in field_ptrs:
                stored = re.search(rf"llvm\.store (%\d+), {re.escape(field_ptr)} : i64,", body)
                if stored is None:
                    continue
                constant = re.search(
                    rf"{re.escape(stored.group(1))} = llvm\.mlir\.constant\((\d+) : i64\)", body
                )
                if constant is not None:
                    found.append(int(constant.group(1)))
    return found


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
    """:func:`fi_patches.wide.budget.smem_bytes` for the same configuration."""
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
