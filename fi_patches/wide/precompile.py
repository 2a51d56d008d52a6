"""Compile wide kernels ahead of serving and report each one's resources (for the
``precompile`` CLI): nothing compiles twice, and each record says what it cost."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fi_patches.wide.pins import PrecompileRequest
from fi_patches.wide.resources import KernelResources


@dataclass(frozen=True)
class PrecompileRecord:
    """One built kernel: what it was built for and its resources."""

    request: PrecompileRequest
    resources: KernelResources


def compile_with_resources(
    tile: int,
    tactic: tuple[int, int, int, int],
    *,
    arch: str | None = None,
    pdl: bool = True,
    use_ptxas: bool | None = None,
) -> KernelResources:
    """Compile (or reuse) one wide kernel and read its resources."""
    from fi_patches.wide.compile import compile_wide
    from fi_patches.wide.resources import kernel_resources

    kernel = compile_wide(tile, tactic, arch=arch, pdl=pdl)
    return kernel_resources(kernel, use_ptxas=use_ptxas)


def precompile(
    requests: Iterable[PrecompileRequest],
    *,
    arch: str | None = None,
    pdl: bool = True,
    use_ptxas: bool | None = None,
) -> list[PrecompileRecord]:
    """Compile every request (see :func:`fi_patches.wide.pins.precompile_requests`)."""
    return [
        PrecompileRecord(
            request,
            compile_with_resources(
                request.tile, request.tactic, arch=arch, pdl=pdl, use_ptxas=use_ptxas
            ),
        )
        for request in requests
    ]
