"""``wide_mm`` on an sm_100/sm_103 GPU against a float64 reference computed from the dequantized
inputs (skipped, with the reason, anywhere else). The check is ``fi_patches.chain.ops``,
which ``python -m fi_patches validate`` runs per pin."""

from __future__ import annotations

from typing import Any

import pytest

from fi_patches.wide.tactics import wide_tactics
from tests.wide_helpers import blackwell_or_skip, low_latency_or_skip

pytestmark = pytest.mark.gpu

N, K = 640, 1536
EXTRA_TACTICS = ((128, 8, 1, 2), (128, 6, 1, 8), (256, 4, 1, 1), (256, 4, 1, 4), (512, 2, 1, 2))


@pytest.fixture(scope="module")
def gpu() -> Any:
    low_latency_or_skip()
    return blackwell_or_skip()


def _check(torch: Any, rows: int, n: int, k: int, **kwargs: Any) -> None:
    from fi_patches.chain.ops import wide_mismatch

    problem = wide_mismatch(n, k, rows, **kwargs)
    assert problem is None, f"rows={rows} n={n} k={k} {kwargs}: {problem}"


@pytest.mark.parametrize("rows", range(9, 49))
def test_auto_tile_and_tactic(gpu: Any, rows: int) -> None:
    _check(gpu, rows, N, K)


@pytest.mark.parametrize("tile", (16, 32, 48))
@pytest.mark.parametrize("tactic", EXTRA_TACTICS)
def test_tactics(gpu: Any, tile: int, tactic: tuple[int, int, int, int]) -> None:
    if tactic not in wide_tactics(N, K, tile):
        pytest.skip(f"{tactic} is not valid at tile {tile}")
    for rows in (tile - 7, tile):
        _check(gpu, rows, N, K, tile=tile, tactic=tactic)


def test_large_weight_and_tail(gpu: Any) -> None:
    _check(gpu, 33, 7168, 512)
    _check(gpu, 20, 200, 1024)


def test_repacked_scales_for_rows_over_the_tile(gpu: Any) -> None:
    _check(gpu, 40, N, K, tile=16, repack_scales=True)
    with pytest.raises(ValueError, match="repack_scales=True"):
        _check(gpu, 40, N, K, tile=16)
