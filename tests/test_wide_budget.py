"""The wide tile's budgets and validity rules against FlashInfer's own 8-row rules and the
kernel's own checks (CPU only)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from fi_patches.wide.budget import (
    MAX_AB_STAGES,
    MXFP8,
    NVFP4,
    SUPPORTED_SPLIT_K,
    TMEM_COLUMNS,
    GemmDtypes,
    config_reason,
    invalid_reason,
    smem_bytes,
    smem_capacity,
    tmem_columns,
)
from fi_patches.wide.tactics import Tactic, default_tactic, wide_tactics
from tests.wide_helpers import low_latency_or_skip

WIDE = Path(__file__).resolve().parent.parent / "fi_patches" / "wide"
PURE_MODULES = [
    "fi_patches.wide",
    *(f"fi_patches.wide.{p.stem}" for p in sorted(WIDE.glob("*.py")) if p.stem != "__init__"),
]
"""Every module of the wide-tile package, each once: all import without torch or the DSL."""

K_SWEEP = (512, 1536, 4096, 7168)


def test_importing_wide_modules_loads_no_heavy_dependency() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {PURE_MODULES!r}: importlib.import_module(name)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'cutlass', "
        "'flashinfer', 'cuda'})\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_capacity_comes_from_cutlass() -> None:
    low_latency_or_skip()
    from cutlass.memory import get_smem_capacity_in_bytes

    for arch in ("sm_100a", "sm_103a", "sm_103"):
        family = arch[:6]
        assert smem_capacity(arch) == get_smem_capacity_in_bytes(family)


@pytest.mark.parametrize("dtypes", [MXFP8, NVFP4], ids=["mxfp8", "nvfp4"])
def test_tile_8_matches_flashinfer_formula_and_can_implement(dtypes: GemmDtypes) -> None:
    module = low_latency_or_skip()
    types = dtypes.cutlass_types()
    base = module.LowLatencyBlockscaledGemmKernel
    checked = 0
    for cta_k in (64, 128, 256, 384, 512, 1024):
        for stages, split_k in itertools.product(range(1, MAX_AB_STAGES + 1), SUPPORTED_SPLIT_K):
            ours = smem_bytes(8, cta_k, stages, 1, split_k, dtypes)
            theirs = module._smem_bytes(types[0], types[1], types[3], cta_k, stages, 1, split_k)
            assert ours == theirs, (cta_k, stages, split_k)
            fi_ok = base.can_implement(
                (4096, 8, 4096 * 3, 1),
                *types,
                mma_tiler_mnk=(128, 8, cta_k),
                num_ab_stage=stages,
                num_sfb_tmem_stage=1,
                split_k=split_k,
            )
            reason = invalid_reason((4096, 8, 4096 * 3, 1), 8, (cta_k, stages, 1, split_k), dtypes)
            assert fi_ok == (reason is None), (cta_k, stages, split_k, reason)
            checked += 1
    assert checked == 6 * MAX_AB_STAGES * len(SUPPORTED_SPLIT_K)


@pytest.mark.parametrize("dtypes", [MXFP8, NVFP4], ids=["mxfp8", "nvfp4"])
@pytest.mark.parametrize("k", K_SWEEP)
def test_tile_8_tactics_equal_flashinfer_autotune_tactics(dtypes: GemmDtypes, k: int) -> None:
    module = low_latency_or_skip()
    theirs = [tuple(t) for t in module.autotune_tactics((7168, 8, k, 1), *dtypes.cutlass_types())]
    assert wide_tactics(7168, k, 8, dtypes=dtypes) == theirs


def _dsl_smem_capacity() -> int:
    """The CuTe DSL's own figure for sm_100's dynamic shared memory (not fi_patches' reader)."""
    cutlass = pytest.importorskip("cutlass")
    memory = getattr(cutlass, "memory", None)
    query = getattr(memory, "get_smem_capacity_in_bytes", None) or (
        cutlass.utils.get_smem_capacity_in_bytes
    )
    return int(query("sm_100"))


@pytest.mark.parametrize("k", K_SWEEP)
def test_wider_tiles_offer_a_subset_in_the_same_order(k: int) -> None:
    """A wider tile offers FlashInfer's tile-8 list (see the test above) less exactly the
    tactics that no longer fit: shared memory over the DSL's capacity (``smem_bytes`` is
    what compiled kernels request, test_wide_compile) or accumulator columns over the TMEM
    the tile may take. No check here goes through ``invalid_reason``, the filter under test."""
    module = low_latency_or_skip()
    flashinfer_list = [
        tuple(t) for t in module.autotune_tactics((7168, 8, k, 1), *MXFP8.cutlass_types())
    ]
    capacity = _dsl_smem_capacity()
    for tile in (16, 24, 32, 48, 64, 128):
        tactics = wide_tactics(7168, k, tile)
        assert tactics, tile
        fits = [
            t
            for t in flashinfer_list
            if smem_bytes(tile, *t) <= capacity and tmem_columns(tile, t[0], t[2]) <= TMEM_COLUMNS
        ]
        assert tactics == fits, tile


def test_tactics_for_k_7168_are_every_valid_tactic() -> None:
    """Every tactic of a wide universe that FlashInfer's own ``can_implement`` accepts for the
    tile-independent limits (K divisible, MMA-K and MX alignment, AB stages, its split-K set),
    whose split-K divides the tile's outputs per thread and that fits the DSL's shared memory
    and the TMEM at that tile. No check here goes through ``invalid_reason``, the filter under
    test."""
    module = low_latency_or_skip()
    kernel = module.LowLatencyBlockscaledGemmKernel
    capacity = _dsl_smem_capacity()
    k = 7168
    for tile in (16, 32, 48):
        tactics = wide_tactics(7168, k, tile)
        universe = [
            Tactic(cta_k, s, 1, sk)
            for cta_k in range(32, k + 1, 32)
            for s in range(1, 20)
            for sk in (1, 2, 3, 4, 8, 16)
        ]
        valid = {
            t
            for t in universe
            if kernel.can_implement(
                (7168, 8, k, 1),
                *MXFP8.cutlass_types(),
                mma_tiler_mnk=(128, 8, t.cta_k),
                num_ab_stage=t.ab_stages,
                num_sfb_tmem_stage=1,
                split_k=1,
            )
            and t.split_k in module._SUPPORTED_SPLIT_K
            and tile % t.split_k == 0
            and smem_bytes(tile, *t) <= capacity
            and tmem_columns(tile, t.cta_k, t.sfb_tmem_stages) <= TMEM_COLUMNS
        }
        assert valid, tile
        assert set(tactics) == valid, tile
        assert tactics[0] == default_tactic()


@pytest.mark.parametrize(
    ("tile", "tactic", "needle"),
    [
        (16, (512, 3, 1, 1), "B of shared memory; sm_100 allows"),
        (16, (1024, 2, 1, 1), f"TMEM columns of {TMEM_COLUMNS}"),
        (8, (512, 2, 4, 1), f"TMEM columns of {TMEM_COLUMNS}"),
        (12, (128, 8, 1, 1), "multiple of 8"),
        (136, (128, 2, 1, 1), "[8, 128]"),
        (16, (96, 8, 1, 1), "multiple of 128 for MX"),
        (16, (100, 8, 1, 1), "multiple of the MMA K"),
        (16, (128, 13, 1, 1), "ab_stages must be in [1, 12]"),
        (16, (128, 0, 1, 1), "ab_stages must be in [1, 12]"),
        (16, (128, 8, 1, 3), "split_k must be one of"),
        (16, (128, 8, 1, 16), "split_k must be one of"),
        (16, (128, 8, 0, 1), "sfb_tmem_stages"),
    ],
)
def test_invalid_configs_name_their_limit(tile: int, tactic: tuple[int, ...], needle: str) -> None:
    reason = config_reason(tile, tactic)
    assert reason is not None and needle in reason


def test_smem_reason_carries_both_numbers() -> None:
    tactic = (512, 3, 1, 1)
    reason = config_reason(16, tactic, arch="sm_103a")
    assert reason == (
        f"needs {smem_bytes(16, *tactic)} B of shared memory; sm_103 allows {smem_capacity()} B"
    )


def test_tmem_reason_carries_the_column_count() -> None:
    reason = config_reason(16, (1024, 2, 1, 1))
    assert reason is not None
    assert reason.startswith(f"needs {tmem_columns(16, 1024)} TMEM columns of {TMEM_COLUMNS}")


def test_problem_rules() -> None:
    tactic = (128, 8, 1, 1)
    assert invalid_reason((7168, 16, 7168, 1), 16, tactic) is None
    assert "not a multiple of cta_k" in (invalid_reason((7168, 16, 7040 + 64, 1), 16, tactic) or "")
    rows_reason = invalid_reason((7168, 17, 7168, 1), 16, tactic)
    assert rows_reason is not None and "exceed the 16-row tile" in rows_reason
    assert invalid_reason((7168, 17, 7168, 1), 16, tactic, sfb_per_cta_packed=True) is None
    assert "positive" in (invalid_reason((0, 16, 7168, 1), 16, tactic) or "")


def test_dtype_rules_follow_the_base() -> None:
    assert config_reason(16, (128, 8, 1, 1), GemmDtypes(sf_vec=16)) is not None
    assert config_reason(16, (128, 8, 1, 1), GemmDtypes(c="Float8E4M3FN")) is not None
    assert config_reason(16, (256, 8, 1, 1), NVFP4) is None
    reason = config_reason(16, (256, 4, 1, 1), NVFP4, sfb_tmem_store=True)
    assert reason is not None and "not supported for wide tiles" in reason
    assert "NVFP4-only" in (config_reason(16, (128, 8, 1, 1), sfb_tmem_store=True) or "")


def test_flashinfer_formula_undercounts_wide_tiles() -> None:
    module = low_latency_or_skip()
    types = MXFP8.cutlass_types()
    for tile in (16, 32, 48):
        ours = smem_bytes(tile, 128, 8)
        stock = module._smem_bytes(types[0], types[1], 32, 128, 8, 1, 1)
        assert ours > stock
