"""``can_implement`` of the wide kernel against the shared memory the DSL's launch really
requests, on a sweep around the capacity (configurations just under and just over it)."""

from __future__ import annotations

import pytest

from fi_patches.tools.wide_resources import launch_dynamic_smem
from fi_patches.wide.budget import (
    MAX_AB_STAGES,
    MXFP8,
    NVFP4,
    GemmDtypes,
    smem_bytes,
    smem_capacity,
)
from fi_patches.wide.kernel import compile_wide, wide_kernel_class
from tests.wide_helpers import low_latency_or_skip

ARCH = "sm_103a"


def _boundary(tile: int, cta_k: int, split_k: int, dtypes: GemmDtypes) -> list[int]:
    """The most stages that fit by the formula, and one more (when within the stage range)."""
    fits = [
        s
        for s in range(1, MAX_AB_STAGES + 1)
        if smem_bytes(tile, cta_k, s, 1, split_k, dtypes) <= smem_capacity(ARCH)
    ]
    best = max(fits) if fits else 0
    return [s for s in (best, best + 1) if 1 <= s <= MAX_AB_STAGES]


def _sweep() -> list[tuple[GemmDtypes, int, tuple[int, int, int, int]]]:
    configs = []
    for tile in (16, 32, 48):
        for cta_k in (128, 256, 512):
            for split_k in (1, 8):
                for stages in _boundary(tile, cta_k, split_k, MXFP8):
                    configs.append((MXFP8, tile, (cta_k, stages, 1, split_k)))
    for tile, cta_k, split_k in ((24, 128, 2), (40, 256, 4), (64, 128, 4), (128, 256, 2)):
        for stages in _boundary(tile, cta_k, split_k, MXFP8):
            configs.append((MXFP8, tile, (cta_k, stages, 1, split_k)))
    for tile, cta_k, split_k in ((16, 256, 1), (48, 512, 2)):
        for stages in _boundary(tile, cta_k, split_k, NVFP4):
            configs.append((NVFP4, tile, (cta_k, stages, 1, split_k)))
    return configs


SWEEP = _sweep()


def test_sweep_straddles_the_capacity() -> None:
    over = [c for c in SWEEP if smem_bytes(c[1], *c[2], dtypes=c[0]) > smem_capacity(ARCH)]
    assert 10 <= len(over) < len(SWEEP) - 10
    assert 30 <= len(SWEEP) <= 60


@pytest.mark.parametrize(
    ("dtypes", "tile", "tactic"),
    SWEEP,
    ids=[f"{d.a[:6]}-t{t}-{'-'.join(map(str, tac))}" for d, t, tac in SWEEP],
)
def test_can_implement_agrees_with_the_launch(
    dtypes: GemmDtypes, tile: int, tactic: tuple[int, int, int, int]
) -> None:
    low_latency_or_skip()
    kernel = compile_wide(tile, tactic, arch=ARCH, dtypes=dtypes, check=False)
    launches = launch_dynamic_smem(kernel.host_ir())
    assert launches == [smem_bytes(tile, *tactic, dtypes=dtypes)]
    cta_k, stages, sfb_stages, split_k = tactic
    problem = (7168, tile, cta_k * 4, 1)
    implementable = wide_kernel_class().can_implement(
        problem,
        *dtypes.cutlass_types(),
        mma_tiler_mnk=(128, tile, cta_k),
        num_ab_stage=stages,
        num_sfb_tmem_stage=sfb_stages,
        split_k=split_k,
    )
    fits = launches[0] <= smem_capacity(ARCH)
    assert implementable == fits
    if not fits:
        reason = wide_kernel_class().implement_reason(
            problem,
            *dtypes.cutlass_types(),
            mma_tiler_mnk=(128, tile, cta_k),
            num_ab_stage=stages,
            split_k=split_k,
        )
        assert reason == (
            f"needs {launches[0]} B of shared memory; sm_100 allows {smem_capacity('sm_100')} B"
        )
