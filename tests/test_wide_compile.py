"""Compile wide tiles with the real FlashInfer kernel and cutlass DSL on CPU, and check what the
DSL produced: the arch, the MMA shape, the PDL ordering and the launch's shared memory."""

from __future__ import annotations

import inspect
import re
import struct

import pytest

from fi_patches.tools.wide_resources import launch_dynamic_smem, read_cubin
from fi_patches.wide.budget import (
    WideArchError,
    normalize,
    resolve_arch,
    smem_bytes,
    smem_capacity,
    tmem_columns,
)
from fi_patches.wide.kernel import (
    WideConfigError,
    WideKernel,
    cached_kernels,
    compile_wide,
    wide_kernel_class,
)
from fi_patches.wide.ptx import (
    descriptors,
    mma_instructions,
    parse_entry,
    pdl_order,
    tma_param_indices,
)
from fi_patches.wide.tactics import default_tactic
from tests.wide_helpers import low_latency_or_skip

TILES = (16, 32, 48)
ARCHS = ("sm_103a", "sm_100a")


@pytest.fixture(scope="module")
def kernels() -> dict[tuple[int, str], WideKernel]:
    low_latency_or_skip()
    return {
        (tile, arch): compile_wide(tile, default_tactic(), arch=arch)
        for tile in TILES
        for arch in ARCHS
    }


def _sm(arch: str) -> int:
    return int(re.match(r"sm_(\d+)", arch).group(1))  # type: ignore[union-attr]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tile", TILES)
def test_compiles_for_the_arch(kernels: dict, tile: int, arch: str) -> None:
    kernel = kernels[tile, arch]
    assert kernel.ptx is not None and kernel.cubin is not None
    assert parse_entry(kernel.ptx).target == arch
    info = read_cubin(kernel.cubin)
    assert info.sm == _sm(arch)
    assert struct.unpack_from("<H", kernel.cubin, 0x12)[0] == 190  # EM_CUDA
    assert len(info.kernels) == 1


@pytest.mark.parametrize("tile", TILES)
def test_mma_descriptor_n_is_the_tile(kernels: dict, tile: int) -> None:
    entry = parse_entry(kernels[tile, "sm_103a"].ptx)
    found = descriptors(entry)
    cta_k = default_tactic().cta_k
    assert len(found) == cta_k // 32  # one MMA per 32-wide K step of a k-tile
    shapes = {(d.m, d.n, d.ue8m0_scales, d.a_format, d.b_format) for ds in found for d in ds}
    assert shapes == {(128, tile, True, 0, 0)}  # E4M3 x E4M3, UE8M0 scales


@pytest.mark.parametrize("tile", TILES)
def test_pdl_weight_loads_do_not_wait(kernels: dict, tile: int) -> None:
    order = pdl_order(parse_entry(kernels[tile, "sm_103a"].ptx))
    assert order.ok, order
    assert order.waits == 1 and order.triggers == 1


def test_pdl_check_catches_a_wait_before_the_weight_loads(kernels: dict) -> None:
    ptx = kernels[16, "sm_103a"].ptx
    assert ptx is not None
    body = ptx.index("{", ptx.index(")", ptx.index(".entry")))
    moved = ptx[: body + 1] + "\n\tgriddepcontrol.wait;\n" + ptx[body + 1 :]
    order = pdl_order(parse_entry(moved))
    assert not order.weight_loads_wait_free
    assert not order.trigger_after_weight_loads


def test_pdl_off_has_no_grid_wait() -> None:
    low_latency_or_skip()
    kernel = compile_wide(16, default_tactic(), arch="sm_103a", pdl=False)
    order = pdl_order(parse_entry(kernel.ptx or ""))
    assert order.waits == 0 and order.triggers == 0
    assert not order.activation_loads_behind_wait
    assert not order.ok


def test_tma_roles_come_from_the_kernel_signature() -> None:
    low_latency_or_skip()
    roles = tma_param_indices()
    params = list(inspect.signature(wide_kernel_class().kernel).parameters)[1:]
    assert {params[i] for i in roles.values()} == {
        "tma_atom_a",
        "tma_atom_b",
        "tma_atom_sfa",
        "tma_atom_sfb",
    }


def test_compiles_are_cached(kernels: dict) -> None:
    before = len(cached_kernels())
    again = compile_wide(16, tuple(default_tactic()), arch="sm_103a")
    assert again is kernels[16, "sm_103a"]
    assert len(cached_kernels()) == before


def test_over_budget_is_rejected_before_compiling() -> None:
    low_latency_or_skip()
    before = len(cached_kernels())
    tactic = (512, 3, 1, 1)
    with pytest.raises(WideConfigError) as info:
        compile_wide(16, tactic, arch="sm_103a")
    message = str(info.value)
    assert f"needs {smem_bytes(16, *tactic)} B of shared memory" in message
    assert f"sm_103 allows {smem_capacity('sm_103')} B" in message
    with pytest.raises(WideConfigError, match=r"needs \d+ TMEM columns of 256"):
        compile_wide(16, (1024, 2, 1, 1), arch="sm_103a")
    assert len(cached_kernels()) == before


@pytest.mark.parametrize(("tile", "tactic"), [(16, (1024, 2, 1, 1)), (8, (512, 2, 4, 1))])
def test_tmem_count_equals_the_kernels_own_assertion(tile: int, tactic: tuple) -> None:
    low_latency_or_skip()
    with pytest.raises(AssertionError) as info:
        compile_wide(tile, tactic, arch="sm_103a", check=False)
    match = re.search(r"TMEM column budget exceeded: (\d+) > (\d+)", str(info.value))
    assert match is not None, info.value
    assert int(match.group(1)) == tmem_columns(tile, tactic[0], tactic[2])


def test_subclass_contract() -> None:
    module = low_latency_or_skip()
    cls = wide_kernel_class()
    assert issubclass(cls, module.LowLatencyBlockscaledGemmKernel)
    assert cls is wide_kernel_class()
    kernel = cls(mma_tiler_mnk=(128, 32, 512))
    assert kernel.num_sfb_tmem_stage == 1 and kernel.max_n == 32
    for bad in ((128, 12, 128), (128, 136, 128), (64, 16, 128)):
        with pytest.raises(ValueError, match="unsupported wide tile"):
            cls(mma_tiler_mnk=bad)
    with pytest.raises(ValueError, match="split_k"):
        cls(mma_tiler_mnk=(128, 16, 128), split_k=3)
    base_params = list(
        inspect.signature(module.LowLatencyBlockscaledGemmKernel.can_implement).parameters
    )
    ours = list(inspect.signature(cls.can_implement).parameters)
    assert ours == [*base_params, "sfb_per_cta_packed"]
    types = (8192, 16, 7168, 1)
    from fi_patches.wide.budget import MXFP8

    args = MXFP8.cutlass_types()
    assert cls.can_implement(types, *args, mma_tiler_mnk=(128, 16, 128), num_ab_stage=8)
    assert not cls.can_implement((8192, 24, 7168, 1), *args, mma_tiler_mnk=(128, 16, 128))
    assert cls.can_implement(
        (8192, 24, 7168, 1), *args, mma_tiler_mnk=(128, 16, 128), sfb_per_cta_packed=True
    )
    reason = cls.implement_reason(types, *args, mma_tiler_mnk=(128, 16, 512), num_ab_stage=3)
    assert reason is not None and "shared memory" in reason
    assert cls.wide_smem_bytes(args[0], args[1], 32, 48, 128, 8) == smem_bytes(48, 128, 8)


def test_arch_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    assert normalize("sm_103") == "sm_103a" and normalize("SM100A") == "sm_100a"
    with pytest.raises(WideArchError, match="sm_100"):
        normalize("sm_90a")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device decides the arch here")
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)
    with pytest.raises(WideArchError, match="no arch"):
        resolve_arch()
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_100a")
    assert resolve_arch() == "sm_100a"
    assert resolve_arch("sm_103a") == "sm_103a"


def test_launch_smem_is_what_the_host_code_requests(kernels: dict) -> None:
    for (tile, _), kernel in kernels.items():
        assert launch_dynamic_smem(kernel.host_ir()) == [smem_bytes(tile, *kernel.tactic)]


def test_each_mma_is_counted_once(kernels: dict) -> None:
    """The parser's MMA issues are the PTX text's, counted here by a plain search of the
    compiled kernel: each ``tcgen05.mma.cta_group`` once (no ``.ws`` form, no commit)."""
    ptx = kernels[48, "sm_103a"].ptx
    in_text = re.findall(r"\btcgen05\.mma\.cta_group\S*", ptx)
    found = mma_instructions(parse_entry(ptx))
    assert in_text, "the compiled kernel issues no tcgen05.mma"
    assert len(found) == len(in_text)
    assert sorted(ins.opcode for ins in found) == sorted(t.rstrip(";") for t in in_text)
