"""Wide-tile low-latency MXFP8 GEMM vs ``flashinfer.mm_mxfp8(backend="cute-dsl")`` at 9-48 rows.

Prints, anywhere: the CPU compile time of each wide kernel (tiles 16/32/48). On an sm_100/sm_103
GPU also: per-GEMM times (cold L2) and a CUDA-graph chain of three back-to-back PDL
projections, each with its roofline ratio (weight bytes / measured HBM bandwidth, over the
measured time) and the wide/stock ratio measured in the same run. Elsewhere it says the
timings need sm_100/sm_103 and exits 0.

    python benchmarks/wide_vs_stock.py [--arch sm_103a] [--rows 9,16,24,32,40,48] [--iters 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from fi_patches.cli.console import render as table

DEFAULT_CHAIN = ((7168, 1536), (1536, 7168), (7168, 2048))
"""DeepSeek-like (N, K) projections, run back to back: 7168x1536 -> 1536x7168 -> 7168x2048."""

DEFAULT_ROWS = (9, 12, 16, 20, 24, 32, 40, 48)
TILES = (16, 32, 48)
FLUSH_BYTES = 512 << 20


def compile_times(arch: str) -> None:
    """Compile each tile's default tactic (and a split-K one) in this process, timing each."""
    from fi_patches.tools.wide_resources import launch_dynamic_smem
    from fi_patches.wide.kernel import compile_wide
    from fi_patches.wide.tactics import default_tactic

    start = time.perf_counter()
    import fi_patches.wide.kernel as kernel_module

    kernel_module.wide_kernel_class()
    import_seconds = time.perf_counter() - start
    rows = []
    for tile in TILES:
        for tactic in (default_tactic(), (128, 8, 1, 2), (256, 4, 1, 1)):
            kernel = compile_wide(tile, tactic, arch=arch)
            smem = launch_dynamic_smem(kernel.host_ir())
            rows.append([tile, str(kernel.tactic), arch, f"{kernel.compile_seconds:.2f}", smem[0]])
    print(f"CPU compile time per wide kernel ({arch}; imports {import_seconds:.1f} s)")
    print(table(["tile", "tactic", "arch", "compile s", "launch smem B"], rows))
    print()


def make_operand(torch, rows: int, k: int, device):
    """E4M3 values and E8M0 scales in the standard swizzled layout (built on CPU)."""
    from flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm import (
        reorder_scale_factors,
    )

    values = (torch.randint(-12, 13, (rows, k)).float() / 4).to(torch.float8_e4m3fn)
    exps = torch.randint(124, 131, (rows, k // 32, 1), dtype=torch.uint8)
    scales = reorder_scale_factors(exps, rows, k, 32).reshape(-1).contiguous()
    return values.to(device), scales.to(device)


class Timer:
    """Times CUDA graphs with a cold L2 (a large write between replays, outside the events)."""

    def __init__(self, torch, iters: int) -> None:
        self.torch = torch
        self.iters = iters
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def graph(self, body: Callable[[], None]):
        torch = self.torch
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                body()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        return graph

    def median_us(self, graph) -> float:
        torch = self.torch
        times = []
        for _ in range(self.iters):
            self.flush.fill_(1)
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) * 1000)
        return statistics.median(times)

    def hbm_bytes_per_us(self) -> float:
        torch = self.torch
        src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        dst.copy_(src)
        torch.cuda.synchronize()
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(5):
            dst.copy_(src)
        end.record()
        end.synchronize()
        seconds_us = begin.elapsed_time(end) * 1000 / 5
        del src, dst
        return 2 * (2 << 30) / seconds_us


def weight_bytes(n: int, k: int) -> int:
    return n * k + n * k // 32


def gpu_timings(torch, arch: str, rows_list: Sequence[int], iters: int) -> None:
    import flashinfer

    from fi_patches.wide.launch import wide_mm

    device = torch.device("cuda")
    timer = Timer(torch, iters)
    bandwidth = timer.hbm_bytes_per_us()
    print(f"measured HBM bandwidth: {bandwidth / 1e6:.2f} TB/s (device copy)")
    weights = {shape: make_operand(torch, *shape, device) for shape in DEFAULT_CHAIN}

    def ops(rows: int, shape: tuple[int, int]):
        n, k = shape
        a, a_scale = make_operand(torch, rows, k, device)
        w, w_scale = weights[shape]
        out = torch.empty(rows, n, dtype=torch.bfloat16, device=device)

        def stock() -> None:
            flashinfer.mm_mxfp8(
                a, w.t(), a_scale, w_scale, out_dtype=torch.bfloat16, backend="cute-dsl"
            )

        def wide() -> None:
            wide_mm(a, a_scale, w.t(), w_scale, out=out)

        return stock, wide

    alone = []
    for shape in DEFAULT_CHAIN:
        floor_us = weight_bytes(*shape) / bandwidth
        for rows in rows_list:
            stock, wide = ops(rows, shape)
            t_stock = timer.median_us(timer.graph(stock))
            t_wide = timer.median_us(timer.graph(wide))
            alone.append(
                [
                    f"{shape[0]}x{shape[1]}",
                    rows,
                    f"{t_stock:.1f}",
                    f"{t_wide:.1f}",
                    f"{t_stock / t_wide:.2f}",
                    f"{floor_us / t_stock:.2f}",
                    f"{floor_us / t_wide:.2f}",
                ]
            )
    print("one GEMM per graph, cold L2 (roofline = weight bytes / HBM bandwidth / time)")
    print(
        table(
            ["N x K", "rows", "stock us", "wide us", "stock/wide", "roof stock", "roof wide"], alone
        )
    )
    print()

    chained = []
    floor_us = sum(weight_bytes(*s) for s in DEFAULT_CHAIN) / bandwidth
    for rows in rows_list:
        pairs = [ops(rows, shape) for shape in DEFAULT_CHAIN]

        def stock_chain(pairs=pairs) -> None:
            for stock, _ in pairs:
                stock()

        def wide_chain(pairs=pairs) -> None:
            for _, wide in pairs:
                wide()

        t_stock = timer.median_us(timer.graph(stock_chain))
        t_wide = timer.median_us(timer.graph(wide_chain))
        chained.append(
            [
                rows,
                f"{t_stock:.1f}",
                f"{t_wide:.1f}",
                f"{t_stock / t_wide:.2f}",
                f"{floor_us / t_stock:.2f}",
                f"{floor_us / t_wide:.2f}",
            ]
        )
    chain = " -> ".join(f"{n}x{k}" for n, k in DEFAULT_CHAIN)
    print(f"CUDA-graph chain of three PDL projections ({chain}), cold L2")
    print(table(["rows", "stock us", "wide us", "stock/wide", "roof stock", "roof wide"], chained))


def blackwell(torch) -> str | None:
    """Why kernel timings cannot run here, or None on sm_100/sm_103."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) not in ((10, 0), (10, 3)):
        return f"{torch.cuda.get_device_name()} is sm_{major}{minor}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", help="compile target (default: the device's, else sm_103a)")
    parser.add_argument("--rows", default=",".join(map(str, DEFAULT_ROWS)))
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args(argv)
    import torch

    from fi_patches.wide.budget import WideArchError, resolve_arch

    try:
        arch = resolve_arch(args.arch)
    except WideArchError:
        arch = "sm_103a"
    compile_times(arch)
    reason = blackwell(torch)
    if reason is not None:
        print(f"kernel timings need an sm_100/sm_103 GPU ({reason}); skipped")
        return 0
    rows_list = [int(r) for r in args.rows.split(",")]
    gpu_timings(torch, arch, rows_list, args.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
