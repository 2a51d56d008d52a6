"""Activation-scale layouts against FlashInfer's own scale-factor helpers (CPU)."""

from __future__ import annotations

from typing import Any

import pytest

from fi_patches.wide.launch import (
    per_cta_scale_elements,
    repack_per_cta,
    sf_columns,
    standard_scale_elements,
    unswizzle,
)
from tests.wide_helpers import low_latency_or_skip

K = 1024


def _standard(module: Any, rows: int, k: int = K) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(rows)
    simple = torch.randint(1, 255, (rows, k // 32, 1), dtype=torch.uint8)
    swizzled = module.reorder_scale_factors(simple, rows, k, 32).reshape(-1)
    return simple, swizzled


@pytest.mark.parametrize("rows", [1, 9, 31, 48, 128, 130])
def test_unswizzle_inverts_flashinfer_layout(rows: int) -> None:
    import torch

    module = low_latency_or_skip()
    simple, swizzled = _standard(module, rows)
    assert swizzled.numel() == standard_scale_elements(rows, K)
    assert torch.equal(unswizzle(swizzled, rows, K), simple[:, :, 0])


@pytest.mark.parametrize(("rows", "tile"), [(9, 16), (16, 16), (17, 32), (48, 48)])
def test_one_tile_needs_no_repack(rows: int, tile: int) -> None:
    import torch

    module = low_latency_or_skip()
    _, swizzled = _standard(module, rows)
    repacked = repack_per_cta(swizzled, rows, K, tile)
    assert torch.equal(repacked, swizzled)


@pytest.mark.parametrize(("rows", "tile"), [(24, 16), (48, 16), (40, 32), (130, 48)])
def test_several_tiles_get_one_atom_each(rows: int, tile: int) -> None:
    import torch

    module = low_latency_or_skip()
    simple, swizzled = _standard(module, rows)
    repacked = repack_per_cta(swizzled, rows, K, tile)
    assert repacked.numel() == per_cta_scale_elements(rows, K, tile)
    atom = 128 * sf_columns(K)
    for j in range(-(-rows // tile)):
        block = unswizzle(repacked[j * atom : (j + 1) * atom], 128, K)
        part = simple[j * tile : (j + 1) * tile, :, 0]
        assert torch.equal(block[: part.shape[0]], part)
        assert not block[part.shape[0] :].any()
    assert not torch.equal(repacked[: swizzled.numel()], swizzled)


def test_repack_keeps_the_e8m0_dtype() -> None:
    import torch

    module = low_latency_or_skip()
    _, swizzled = _standard(module, 40)
    e8m0 = swizzled.view(torch.float8_e8m0fnu)
    repacked = repack_per_cta(e8m0, 40, K, 16)
    assert repacked.dtype == torch.float8_e8m0fnu
    assert torch.equal(repacked.view(torch.uint8), repack_per_cta(swizzled, 40, K, 16))
