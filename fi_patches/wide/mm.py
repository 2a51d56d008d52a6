"""``wide_mm``: an MXFP8 GEMM for 9-48 activation rows on the wide low-latency kernel, taking
its inputs exactly as ``flashinfer.mm_mxfp8`` does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fi_patches.wide.arch import resolve_arch
from fi_patches.wide.choose import choose_tactic
from fi_patches.wide.compile import compile_wide
from fi_patches.wide.launch import launch_wide
from fi_patches.wide.scales import repack_per_cta
from fi_patches.wide.tile import TILE_ROUNDING, WIDE_MAX_ROWS, pick_tile


def wide_mm(
    a: Any,
    a_scale: Any,
    weight: Any,
    weight_scale: Any,
    *,
    tactic: Sequence[int] | None = None,
    tile: int | None = None,
    out: Any = None,
    repack_scales: bool = False,
    pdl: bool = True,
    rounding: int = TILE_ROUNDING,
    max_rows: int = WIDE_MAX_ROWS,
) -> Any:
    """``a @ weight`` in BF16 for ``a`` (rows, K) E4M3 with 1-D swizzled 128x4 E8M0 scales and
    ``weight`` the column-major (K, N) view ``w.t()`` of a row-major (N, K) E4M3 tensor with
    its 1-D swizzled scales, as ``mm_mxfp8`` takes them.

    The tile is ``rows`` rounded up to ``rounding`` unless given; the tactic is ``tactic``, else
    a ``[[wide]]`` pin, else the first valid one. Standard activation scales need rows <= tile;
    with a smaller explicit tile pass ``repack_scales=True`` to repack them per CTA (an extra
    copy per call).
    """
    import torch

    if a.dim() != 2 or weight.dim() != 2:
        raise ValueError("a is (rows, K) and weight is the (K, N) view w.t()")
    rows, k = a.shape
    k_w, n = weight.shape
    if k_w != k:
        raise ValueError(f"a has K {k} but weight has K {k_w}")
    native_weight = weight.t()
    if not native_weight.is_contiguous():
        raise ValueError("weight must be the column-major view w.t() of a row-major (N, K) tensor")
    if tile is None:
        tile = pick_tile(rows, rounding=rounding, max_rows=max_rows)
    chosen_tile = tile
    per_cta = rows > chosen_tile
    if per_cta and not repack_scales:
        raise ValueError(
            f"{rows} rows exceed tile {chosen_tile}: standard 128x4 activation scales only match "
            "the kernel's per-CTA layout within one tile; use a tile >= rows or "
            "repack_scales=True"
        )
    arch = resolve_arch(None)
    chosen = choose_tactic(n, k, chosen_tile, rows, tactic, arch=arch, sfb_per_cta_packed=per_cta)
    kernel = compile_wide(chosen_tile, chosen, arch=arch, pdl=pdl)
    if out is None:
        out = torch.empty((rows, n), dtype=torch.bfloat16, device=a.device)
    scales = repack_per_cta(a_scale, rows, k, chosen_tile) if per_cta else a_scale
    return launch_wide(kernel, native_weight, weight_scale, a, scales, out, a_scale_per_cta=per_cta)
