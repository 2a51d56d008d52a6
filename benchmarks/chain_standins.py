"""The chain harness's GPU machinery on any CUDA GPU, with torch stand-ins for the GEMM runners
(no FlashInfer, no Blackwell needed): CUDA-graph capture of a 3-op chain, selection in the chain
and alone, repeatability, and a chain-vs-isolated comparison measured in the same run.

Each stand-in op is a bf16 GEMM ``x @ w.T`` offering six "tactics", in this enumerator order:

* ``("splitk", s)`` for s = 1, 2, 4: one GEMM, or s K-slices as a batched GEMM plus a sum;
* ``("prefetch", 1)``: reads its weight (a sum) on a side stream forked where the previous op
  starts, then runs the GEMM once both are done: a weight-load prologue that overlaps the
  previous op, the rest of the GEMM after it;
* ``("overlap", 1)``: the GEMM on a side stream forked where the *previous* op of the chain
  starts (``fi_patches.chain.chain_position()``), joined before the next op. Alone there is
  nothing to overlap and it only adds a fork and a join; in the chain it runs beside the
  previous op, as a PDL kernel's prologue runs beside its predecessor's tail. The stand-ins'
  inputs do not depend on each other, so the whole GEMM can overlap: a larger effect than a
  real kernel's weight-load prologue gets. It is there to show the harness measuring an effect
  that timing each op alone cannot see;
* ``("slow", 1)``: the same GEMM computed twice -- deliberately slower, it must never win.

Every timed replay starts from a flushed L2.

    python benchmarks/chain_standins.py [--runs 3] [--repeats 9] [--replays 20] [--cpu-smoke]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from typing import Any

from fi_patches.chain.ops import RunnerOp
from fi_patches.chain.select import Slot, measure, tune
from fi_patches.chain.spec import Bucket, Settings
from fi_patches.chain.timing import CudaGraphTimer, Trial, chain_position
from fi_patches.cli.console import render as table

SHAPES = (("a", 2048, 2048), ("b", 3072, 1536), ("c", 2048, 2304))
"""(name, N, K): bf16 weights of 8.4, 9.4 and 9.4 MB."""

TACTICS = (
    ("splitk", 1),
    ("splitk", 2),
    ("splitk", 4),
    ("prefetch", 1),
    ("overlap", 1),
    ("slow", 1),
)
SLOW = ("slow", 1)
BUCKETS = (Bucket(1, 8, 8, 1), Bucket(9, 32, 32, 2))

_starts: dict[tuple[int, int], Any] = {}
"""CUDA events recorded where each op of the current chain run starts: (run, index) -> event."""


class StandinGemm:
    """A runner with FlashInfer's two methods, computing ``out = x @ w.T`` per its tactic."""

    def __init__(self, torch: Any, n: int, k: int, device: Any, seed: int) -> None:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        self.torch, self.n, self.k, self.device = torch, n, k, device
        weight = torch.randn(n, k, generator=gen, dtype=torch.float32) / k**0.5
        self.weight = weight.to(device=device, dtype=torch.bfloat16)
        self.cuda = device.type == "cuda"
        self.side: Any = torch.cuda.Stream(device) if self.cuda else None
        self.sink = torch.zeros((), dtype=torch.float32, device=device)

    def get_valid_tactics(self, inputs: Any, profile: Any) -> list[Any]:
        return list(TACTICS)

    def inputs(self, rows: int, seed: int) -> dict[str, Any]:
        torch = self.torch
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randn(rows, self.k, generator=gen).to(device=self.device, dtype=torch.bfloat16)
        return {
            "x": x,
            "out": torch.empty(rows, self.n, dtype=torch.bfloat16, device=self.device),
            "partial": torch.empty(4, rows, self.n, dtype=torch.bfloat16, device=self.device),
        }

    def _mark_start(self) -> Any:
        position = chain_position()
        if not self.cuda or position is None:
            return None
        for key in [key for key in _starts if key[0] != position.run]:
            del _starts[key]
        event = self.torch.cuda.Event()
        event.record()
        _starts[(position.run, position.index)] = event
        return position

    def _prefetch(self, position: Any) -> None:
        """Read the weight on the side stream, from where the previous op of this run starts."""
        torch = self.torch
        flat = self.weight.view(-1)
        if not self.cuda:
            torch.sum(flat, 0, dtype=torch.float32, out=self.sink)
            return
        main = torch.cuda.current_stream()
        previous = None
        if position is not None and position.index > 0:
            previous = _starts.get((position.run, position.index - 1))
        if previous is not None:
            self.side.wait_event(previous)
        else:
            self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            torch.sum(flat, 0, dtype=torch.float32, out=self.sink)
        main.wait_stream(self.side)

    def _overlapped(self, position: Any, x: Any, out: Any) -> None:
        """The GEMM on the side stream, from where the previous op of this chain run starts."""
        torch = self.torch
        if not self.cuda:
            torch.mm(x, self.weight.t(), out=out)
            return
        main = torch.cuda.current_stream()
        previous = None
        if position is not None and position.index > 0:
            previous = _starts.get((position.run, position.index - 1))
        if previous is not None:
            self.side.wait_event(previous)
        else:
            self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            torch.mm(x, self.weight.t(), out=out)
        main.wait_stream(self.side)

    def forward(self, inputs: dict[str, Any], tactic: Any = None, **kwargs: Any) -> None:
        torch = self.torch
        x, out, w = inputs["x"], inputs["out"], self.weight
        position = self._mark_start()
        kind, split = tactic
        if kind == "overlap":
            self._overlapped(position, x, out)
            return
        if kind == "prefetch":
            self._prefetch(position)
        if kind == "slow":
            torch.mm(x, w.t(), out=out)
        if kind == "splitk" and split > 1:
            rows = x.shape[0]
            xs = x.view(rows, split, self.k // split).transpose(0, 1)
            ws = w.view(self.n, split, self.k // split).permute(1, 2, 0)
            partial = inputs["partial"][:split]
            torch.bmm(xs, ws, out=partial)
            torch.sum(partial, 0, out=out)
        else:
            torch.mm(x, w.t(), out=out)


def make_ops(torch: Any, device: Any) -> list[RunnerOp]:
    ops = []
    for seed, (name, n, k) in enumerate(SHAPES):
        runner = StandinGemm(torch, n, k, device, seed)
        ops.append(RunnerOp(name, runner, functools.partial(_inputs, runner)))
    return ops


def _inputs(runner: StandinGemm, rows: int) -> Any:
    return runner.inputs(rows, 100 + rows)


def plan(ops: list[RunnerOp]) -> list[tuple[Bucket, list[Slot]]]:
    return [(bucket, [Slot(op.name, op.name, op) for op in ops]) for bucket in BUCKETS]


def max_error(torch: Any, op: RunnerOp, rows: int) -> float:
    """Largest |out - x @ w.T| over the largest |x @ w.T|, in float32."""
    inputs = op.inputs(rows)
    ref = inputs["x"].float() @ op.runner.weight.float().t()
    return float((inputs["out"].float() - ref).abs().max() / ref.abs().max())


def capture_check(torch: Any, ops: list[RunnerOp], timer: Any) -> bool:
    """Capture the 3-op chain with each tactic on every op, replay it, check every output."""
    rows_out, ok = [], True
    for rows in (b.rows for b in BUCKETS):
        for tactic in TACTICS:
            for op in ops:
                op.inputs(rows)["out"].fill_(float("nan"))
            trial = Trial(rows, tuple(o.name for o in ops), (tactic,) * 3, tuple(ops))
            timed = timer.prepare(trial)  # eager run, capture, warm-up replays
            for op in ops:
                op.inputs(rows)["out"].fill_(float("nan"))
            us = timed.sample()  # graph replays only
            torch.cuda.synchronize()
            errors = [max_error(torch, op, rows) for op in ops]
            good = all(e < 2e-2 for e in errors)  # NaN compares False: unwritten outputs fail
            ok &= good
            rows_out.append(
                [
                    rows,
                    str(tactic),
                    f"{us:.1f}",
                    " ".join(f"{e:.1e}" for e in errors),
                    "yes" if good else "NO",
                ]
            )
            timed.close()
    print(
        "CUDA-graph capture of the 3-op chain (a -> b -> c), every op on one tactic;"
        " outputs poisoned with NaN before the replays"
    )
    print(table(["rows", "tactic", "chain us", "max rel err a b c", "outputs ok"], rows_out))
    print()
    return ok


def picks(results: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(r.bucket.label, dict(r.chosen)) for r in results]


def describe(results: list[Any], mode: str) -> list[list[str]]:
    rows = []
    for result in results:
        for name, tactic in result.chosen.items():
            step = result.final_step(name)
            stats = {s.tactic: s for s in step.candidates}
            rows.append(
                [
                    result.bucket.label,
                    mode,
                    name,
                    str(tactic),
                    "  ".join(f"{stats[t].median:6.1f}" for t in TACTICS),
                    f"{stats[tactic].spread:.1%}",
                    f"tie of {len(step.tied)}: {step.rule}" if step.tie else step.rule,
                ]
            )
    return rows


def compare(
    timer: Any, ops: list[RunnerOp], chain: list[Any], alone: list[Any], repeats: int
) -> list[list[str]]:
    """The chain with the chain's picks vs with the isolated picks, interleaved, same run."""
    rows = []
    names = tuple(o.name for o in ops)
    for c, a in zip(chain, alone, strict=True):
        trials = [
            Trial(c.bucket.rows, names, tuple(r.chosen[n] for n in names), tuple(ops))
            for r in (c, a)
        ]
        samples = measure(trials, timer, repeats)
        chain_us, alone_us = (statistics.median(s) for s in samples)
        rows.append(
            [c.bucket.label, f"{chain_us:.1f}", f"{alone_us:.1f}", f"{alone_us / chain_us:.3f}"]
        )
    return rows


def run_gpu(torch: Any, args: argparse.Namespace) -> int:
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    major, minor = torch.cuda.get_device_capability(device)
    print(
        f"device: {props.name} (sm_{major}{minor}), L2 {props.L2_cache_size >> 20} MiB, "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, python {sys.version.split()[0]}"
    )
    print("stand-in weights (N x K, bf16): " + ", ".join(f"{n} {N}x{K}" for n, N, K in SHAPES))
    print(f"tactics (enumerator order): {', '.join(str(t) for t in TACTICS)}")
    settings = Settings(
        repeats=args.repeats,
        replays=args.replays,
        warmup=3,
        cold_l2=True,
        tie_tolerance=args.tie_tolerance,
        max_passes=4,
    )
    print(f"settings: {settings}")
    print()
    ops = make_ops(torch, device)
    timer = CudaGraphTimer(replays=settings.replays, warmup=settings.warmup, cold_l2=True)
    captured = capture_check(torch, ops, timer)

    start = time.perf_counter()
    chain_runs = [tune(plan(ops), timer, settings) for _ in range(args.runs)]
    alone_runs = [tune(plan(ops), timer, settings, isolated=True) for _ in range(args.runs)]
    seconds = time.perf_counter() - start

    header = [
        "rows",
        "mode",
        "op",
        "chosen",
        "median us per tactic (" + ", ".join(f"{k[0][:2]}{k[1]}" for k in TACTICS) + ")",
        "spread",
        "choice",
    ]
    print(
        "run 1: each op's final step, the median of every candidate (chain: the whole chain's"
        " time with the other ops fixed; isolated: the op alone)"
    )
    print(table(header, describe(chain_runs[0], "chain") + describe(alone_runs[0], "isolated")))
    print()
    every = []
    for number, (chain, alone) in enumerate(zip(chain_runs, alone_runs, strict=True), 1):
        for mode, results in (("chain", chain), ("isolated", alone)):
            for result in results:
                chosen = [str(result.chosen[name]) for name, _, _ in SHAPES]
                every.append([number, mode, result.bucket.label, result.passes, *chosen])
    print(f"picks of every run ({2 * args.runs} tuning runs took {seconds:.1f} s)")
    print(table(["run", "mode", "rows", "passes", *(name for name, _, _ in SHAPES)], every))
    print()

    chain_picks = [picks(r) for r in chain_runs]
    alone_picks = [picks(r) for r in alone_runs]
    slow = [
        (mode, label, name)
        for mode, runs in (("chain", chain_picks), ("isolated", alone_picks))
        for run in runs
        for label, chosen in run
        for name, t in chosen.items()
        if t == SLOW
    ]
    differ = [
        (label, name, alone[name], chain[name])
        for (label, chain), (_, alone) in zip(chain_picks[0], alone_picks[0], strict=True)
        for name in chain
        if chain[name] != alone[name]
    ]
    print("chain picks vs isolated picks, both timed in the chain (interleaved, same run)")
    print(
        table(
            ["rows", "chain picks us", "isolated picks us", "isolated / chain"],
            compare(timer, ops, chain_runs[0], alone_runs[0], args.repeats * 2),
        )
    )
    print()
    print(
        f"capture of the 3-op chain, every tactic, outputs correct: {'yes' if captured else 'NO'}"
    )
    print(f"deliberately slower tactic {SLOW} chosen: {slow or 'never'}")
    print(
        f"{args.runs} chain runs chose the same pins: "
        f"{'yes' if all(p == chain_picks[0] for p in chain_picks) else 'NO'}"
    )
    print(
        f"{args.runs} isolated runs chose the same pins: "
        f"{'yes' if all(p == alone_picks[0] for p in alone_picks) else 'NO'}"
    )
    if differ:
        print(
            "isolated and chain picks differ (run 1): "
            + "; ".join(
                f"rows {label} op {name}: alone {a}, chain {c}" for label, name, a, c in differ
            )
        )
    else:
        print("isolated and chain picks differ: NO, they agree in run 1")
    return 0 if captured else 1


class EagerTimer:
    """CPU smoke only: times eager runs with perf_counter (no graphs, no events)."""

    def prepare(self, trial: Trial) -> Any:
        from fi_patches.chain.timing import run_chain

        inputs = [op.inputs(trial.rows) for op in trial.ops]

        class Timed:
            def sample(self) -> float:
                start = time.perf_counter()
                run_chain(trial, inputs)
                return (time.perf_counter() - start) * 1e6

            def close(self) -> None:
                pass

        return Timed()


def run_cpu_smoke(torch: Any) -> int:
    ops = make_ops(torch, torch.device("cpu"))
    for rows in (8, 32):
        for tactic in TACTICS:
            for op in ops:
                op.launch(op.inputs(rows), tactic)
                error = max_error(torch, op, rows)
                assert error < 2e-2, (op.name, rows, tactic, error)
    results = tune(plan(ops), EagerTimer(), Settings(repeats=2, tie_tolerance=0.05))
    print(
        f"CPU smoke: every tactic computes x @ w.T; selection ran over {len(results)} buckets "
        "(CPU timings mean nothing)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--tie-tolerance", type=float, default=0.02)
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="without CUDA: check the stand-ins' arithmetic and the selection",
    )
    args = parser.parse_args(argv)
    import torch

    if args.cpu_smoke:
        return run_cpu_smoke(torch)
    if not torch.cuda.is_available():
        print(
            "chain_standins needs a CUDA GPU (any); torch sees none. --cpu-smoke checks the "
            "stand-ins on CPU."
        )
        return 0
    return run_gpu(torch, args)


if __name__ == "__main__":
    sys.exit(main())
