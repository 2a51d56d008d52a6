"""Activation scale layouts: FlashInfer's standard 1-D swizzled 128x4 layout (what
``mxfp8_quantize(..., is_sf_swizzled_layout=True)`` produces) and the per-CTA layout the
kernel reads, where each ``tile``-row block of rows gets its own 128-row atom. The two are
byte-identical when all rows fit one tile (wide_tile.md §3.5); otherwise repack.
"""

from __future__ import annotations

from typing import Any

from fi_patches.wide.limits import SF_ATOM_COLS, SF_ATOM_ROWS


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def sf_columns(k: int, sf_vec: int = 32) -> int:
    """Scale columns per row, padded to whole 4-column atoms."""
    return _ceil_div(_ceil_div(k, sf_vec), SF_ATOM_COLS) * SF_ATOM_COLS


def standard_scale_elements(rows: int, k: int, sf_vec: int = 32) -> int:
    """Elements of the standard 128x4 swizzled scales of ``rows`` rows."""
    return _ceil_div(rows, SF_ATOM_ROWS) * SF_ATOM_ROWS * sf_columns(k, sf_vec)


def per_cta_scale_elements(rows: int, k: int, tile: int, sf_vec: int = 32) -> int:
    """Elements the kernel reads for ``rows`` activation rows at ``tile``: one 128-row atom
    per tile."""
    return _ceil_div(rows, tile) * SF_ATOM_ROWS * sf_columns(k, sf_vec)


def unswizzle(scales: Any, rows: int, k: int, sf_vec: int = 32) -> Any:
    """The ``(rows, ceil(k / sf_vec))`` row-major matrix held by standard swizzled scales.

    Element ``(r, c)`` sits at ``((r // 128 * atoms_k + c // 4) * 32 + r % 32) * 16
    + (r // 32 % 4) * 4 + c % 4``.
    """
    atoms_mn = _ceil_div(rows, SF_ATOM_ROWS)
    atoms_k = sf_columns(k, sf_vec) // SF_ATOM_COLS
    flat = scales.reshape(-1)[: standard_scale_elements(rows, k, sf_vec)]
    grid = flat.view(atoms_mn, atoms_k, 32, 4, SF_ATOM_COLS).permute(0, 3, 2, 1, 4)
    matrix = grid.reshape(atoms_mn * SF_ATOM_ROWS, atoms_k * SF_ATOM_COLS)
    return matrix[:rows, : _ceil_div(k, sf_vec)]


def repack_per_cta(scales: Any, rows: int, k: int, tile: int, sf_vec: int = 32) -> Any:
    """Standard swizzled activation scales repacked into the kernel's per-CTA layout (1-D,
    :func:`per_cta_scale_elements` long) with FlashInfer's ``reorder_scale_factors_per_cta``."""
    from fi_patches.internals import flashinfer as fi

    reorder_scale_factors_per_cta = fi.reorder_scale_factors_per_cta()
    raw = scales.view(_byte_dtype()) if scales.element_size() == 1 else scales
    matrix = unswizzle(raw, rows, k, sf_vec).unsqueeze(-1)
    packed = reorder_scale_factors_per_cta(matrix, tile, k, sf_vec)
    packed = packed.reshape(-1).contiguous()
    return packed.view(scales.dtype) if packed.dtype != scales.dtype else packed


def _byte_dtype() -> Any:
    import torch

    return torch.uint8
