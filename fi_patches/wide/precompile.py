"""Checks and compiles for ``[[wide]]`` pin entries: why a pin can never run (for pin-table
validation), what to build for a set of weight shapes, and compiling them with their resource
reports (the precompile CLI)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fi_patches.wide.budget import invalid_reason
from fi_patches.wide.dtypes import MXFP8, GemmDtypes
from fi_patches.wide.resources import KernelResources
from fi_patches.wide.tactics import Tactic, typed_tactic


def wide_pin_reason(
    n: int,
    k: int,
    tile: int,
    tactic: Sequence[int],
    *,
    dtypes: GemmDtypes = MXFP8,
    arch: str | None = None,
) -> str | None:
    """Why a ``[[wide]]`` pin ``(n, k, tile, tactic)`` can never run, or None. ``arch`` picks
    the shared-memory capacity (default sm_100's, equal to sm_103's)."""
    try:
        checked = typed_tactic(tactic)
    except ValueError as exc:
        return str(exc)
    if checked.sfb_tmem_stages != 1:
        return (
            f"sfb_tmem_stages must be 1 on the direct SFB path (FlashInfer's dispatch uses 1), "
            f"got {checked.sfb_tmem_stages}"
        )
    return invalid_reason((n, tile, k, 1), tile, checked, dtypes, arch=arch)


@dataclass(frozen=True)
class PrecompileRequest:
    """One kernel to build: the weight shape it serves, the tile and the tactic."""

    n: int
    k: int
    tile: int
    tactic: Tactic


def precompile_requests(
    shapes: Iterable[tuple[int, int]],
    tiles: Iterable[int] = (16, 32, 48),
    *,
    all_tactics: bool = False,
    arch: str | None = None,
) -> list[PrecompileRequest]:
    """What to build for ``shapes`` (N, K) at ``tiles``: the tactic ``wide_mm`` would pick
    (pin or first valid), or every valid tactic with ``all_tactics`` (what a tuner profiles)."""
    from fi_patches.wide.tactics import choose_tactic, wide_tactics

    requests: list[PrecompileRequest] = []
    tile_list = list(tiles)
    for n, k in shapes:
        for tile in tile_list:
            if all_tactics:
                chosen = wide_tactics(n, k, tile, arch=arch)
            else:
                chosen = [choose_tactic(n, k, tile, tile, arch=arch)]
            requests.extend(PrecompileRequest(n, k, tile, t) for t in chosen)
    return requests


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
    """Compile every request (see :func:`fi_patches.wide.precompile.precompile_requests`)."""
    return [
        PrecompileRecord(
            request,
            compile_with_resources(
                request.tile, request.tactic, arch=arch, pdl=pdl, use_ptxas=use_ptxas
            ),
        )
        for request in requests
    ]
