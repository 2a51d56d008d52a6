"""Resources of compiled wide kernels: ptxas 13.5 on the DSL's PTX, the DSL's own cubin and the
launch configuration must tell one story."""

from __future__ import annotations

import pytest

from fi_patches.tools.wide_resources import (
    PtxasError,
    compile_with_resources,
    kernel_resources,
    parse_verbose,
    precompile,
    precompile_requests,
    read_cubin,
    run_ptxas,
)
from fi_patches.wide.budget import smem_capacity
from fi_patches.wide.kernel import compile_wide
from fi_patches.wide.tactics import default_tactic
from tests.wide_helpers import low_latency_or_skip, ptxas_or_skip

CASES = [(16, (128, 8, 1, 1)), (32, (128, 8, 1, 2)), (48, (128, 8, 1, 1)), (48, (512, 2, 1, 8))]


@pytest.mark.parametrize(("tile", "tactic"), CASES)
def test_ptxas_and_cubin_agree(tile: int, tactic: tuple[int, int, int, int]) -> None:
    low_latency_or_skip()
    ptxas_or_skip()
    kernel = compile_wide(tile, tactic, arch="sm_103a")
    report = kernel_resources(kernel, use_ptxas=True)
    assert report.ptxas_version is not None
    assert report.registers == report.cubin_registers
    assert report.stack_frame_bytes == report.cubin_frame_size
    assert report.registers is not None and 0 < report.registers <= 65536 // 384
    assert report.spill_store_bytes is not None and report.spill_load_bytes is not None
    assert report.spills == (report.spill_store_bytes + report.spill_load_bytes > 0)
    assert report.static_smem_bytes == 0  # the kernel uses dynamic shared memory only
    assert report.launch_dynamic_smem_bytes == report.formula_smem_bytes
    assert report.launch_dynamic_smem_bytes <= smem_capacity("sm_103a")
    _, cubin = run_ptxas(kernel.ptx or "", "sm_103a")
    assert read_cubin(cubin).sm == report.cubin_sm == 103


def test_resources_without_ptxas_use_the_cubin() -> None:
    low_latency_or_skip()
    kernel = compile_wide(16, default_tactic(), arch="sm_100a")
    report = kernel_resources(kernel, use_ptxas=False)
    assert report.registers == report.cubin_registers is not None
    assert report.spill_store_bytes is None and report.spills is None
    assert report.cubin_sm == 100


def test_missing_ptxas_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FI_PATCHES_PTXAS", "/nonexistent/ptxas")
    with pytest.raises(PtxasError, match=r"nvidia-cuda-nvcc==13\.5\.37"):
        run_ptxas(".version 9.4\n", "sm_103a")


def test_parse_verbose_reads_each_kernel() -> None:
    text = (
        "ptxas info    : Function properties for k1\n"
        "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 56 registers, used 1 barriers, 32 bytes smem\n"
        "ptxas info    : Function properties for k2\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 9 registers\n"
    )
    first, second = parse_verbose(text, "sm_103a")
    assert (first.kernel, first.registers, first.stack_frame_bytes) == ("k1", 56, 16)
    assert (first.spill_store_bytes, first.spill_load_bytes, first.static_smem_bytes) == (8, 4, 32)
    assert (second.kernel, second.registers, second.barriers) == ("k2", 9, None)


def test_precompile_reports_each_requested_kernel() -> None:
    low_latency_or_skip()
    requests = precompile_requests([(7168, 1536)], tiles=(16, 32))
    assert [(r.tile, r.tactic) for r in requests] == [
        (16, default_tactic()),
        (32, default_tactic()),
    ]
    records = precompile(requests, arch="sm_103a", use_ptxas=False)
    assert [r.resources.tile for r in records] == [16, 32]
    assert all(r.resources.launch_dynamic_smem_bytes for r in records)
    single = compile_with_resources(16, default_tactic(), arch="sm_103a", use_ptxas=False)
    assert single == records[0].resources
