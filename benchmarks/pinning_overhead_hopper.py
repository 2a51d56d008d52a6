"""What a lockfile costs FlashInfer's own Hopper runners on a GPU: ``get_valid_tactics`` of the
runner of ``mm_bf16`` (cuDNN, cuBLASLt) and ``bmm_fp8`` (cuBLAS, cuDNN), stock vs inside
``pinned_tactics(lockfile)``, for a key the lockfile pins and for one it does not (another
weight of the same runner, the unpinned problem of a pinned runner); and the host time of a
serving call of the op itself (its tuner lookup and launch, the GPU left to run), stock vs
each serving mode: process-wide pins, a narrowing block, a preseed block, and another thread's
block (none in this one), for the pinned weight and another; and two reference rows: stock
beside an idle thread, and the floor (a bare pass-through wrapper of FlashInfer's lookup).
``get_valid_tactics``'s unpinned problem has a floor row too: a wrapper that tests the shape of
the input fi_patches' probe reads against a set, then calls FlashInfer's method, the least a
wrapper that finds a direct call's pin costs.

The lockfile is what users make: one ``autotune(True, cache=...)`` of each op at 8 rows of a
(4096, 4096) weight, then ``python -m fi_patches pins record``. The runner and its inputs are
the ones FlashInfer's ``choose_one`` is handed for that call (read by a pass-through wrapper of
this script's own, removed before timing). Ratios are against the stock call measured in the
same run: alternating rounds, this thread's CPU time, the median of per-round ratios.
Needs a CUDA GPU FlashInfer serves these ops on (sm_90 and newer):
    python benchmarks/pinning_overhead_hopper.py [--rounds 101] [--out DIR] [--ops OP:BACKEND,...]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

OPS = ("mm_bf16:cudnn", "mm_bf16:cublaslt", "bmm_fp8:cublas", "bmm_fp8:cudnn")
PINNED, UNPINNED = (4096, 4096), (2048, 4096)  # (n, k): the recorded weight, another one
ROWS = 8
TARGET_UNPINNED, TARGET_PINNED = 1.05, 1.00  # issue 30: get_valid_tactics of a pinned runner
TARGET_SERVING = 1.02
"""A serving call's host time in every mode: within this of stock's (issue 30)."""
WARM_CALLS = 200
"""Untimed calls before each timed batch, stock and every mode alike. Entering a mode installs
wrappers and leaving it removes them (class attributes change, so CPython re-specializes the
code that reads them) and its first call decides the key; the rows measure the steady per-call
cost a server pays, not that one-time cost (as ``benchmarks/pinning_overhead.py`` does). After
a block, FlashInfer's stock lookup takes about 120 calls to get back to its steady cost
(``benchmarks/class_changes.py``, Python 3.11), so fewer warm calls would time part of that in
every mode (each follows an installation) and in only some stock batches (those that follow a
removal). It was 20 until 2026-12-06."""
BATCH_S = 10e-3
"""About how long one timed batch runs: a serving call takes 0.1-0.3 ms of host time, so a
batch holds 30-100 calls."""
SERVING_MODES = ("process-wide", "narrow", "preseed", "other thread")
IDLE_THREAD = "idle thread"
"""A reference row, stock with no wrapper installed while another thread waits as the "other
thread" mode's holder does (no block): what a second thread alone costs this one."""
FLOOR = "floor"
"""A reference row. For a serving call: a bare ``search_cache`` wrapper (FlashInfer's
parameters; it calls FlashInfer's method and does nothing else), installed around its batch
alone, no pins: the least any wrapper of FlashInfer's lookup costs a serving call, to read the
modes' rows against. For ``get_valid_tactics``: ``class_changes.floor_valid_tactics``."""
"""process-wide: ``register_pins`` + ``enable()`` (what FI_PATCHES_PINS and the host plugins
run); narrow, preseed: a ``pinned_tactics`` block of that mode; other thread: another thread
holds a block, this one has none (the wrappers installed, nothing pinned here)."""


def _operands(torch: Any, op: str, rows: int, n: int, k: int) -> tuple[Any, Any]:
    if op == "mm_bf16":
        a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        return a, torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    a = (torch.randn(1, rows, k, device="cuda") / 4).to(torch.float8_e4m3fn)
    w = (torch.randn(1, n, k, device="cuda") / 4).to(torch.float8_e4m3fn)
    return a, w.transpose(-2, -1)


def _call(flashinfer: Any, torch: Any, op: str, backend: str, a: Any, w: Any) -> Any:
    if op == "mm_bf16":
        return flashinfer.mm_bf16(a, w, backend=backend)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return flashinfer.bmm_fp8(a, w, one, one, torch.bfloat16, backend=backend)


def _handed(flashinfer: Any, torch: Any, op: str, backend: str, n: int, k: int) -> tuple[Any, Any]:
    """The first runner and the inputs ``choose_one`` is handed for one call of ``op``."""
    from flashinfer.autotuner import AutoTuner

    seen: list[tuple[Any, Any]] = []
    original = AutoTuner.choose_one

    def spy(self: Any, custom_op: Any, runners: Any, config: Any, inputs: Any, **kw: Any) -> Any:
        seen.append((runners[0], list(inputs)))
        return original(self, custom_op, runners, config, inputs, **kw)

    AutoTuner.choose_one = spy  # type: ignore[method-assign, assignment]
    try:
        _call(flashinfer, torch, op, backend, *_operands(torch, op, ROWS, n, k))
    finally:
        AutoTuner.choose_one = original  # type: ignore[method-assign, assignment]
    return seen[0]


def _lockfile(flashinfer: Any, torch: Any, name: str, folder: Path) -> Path:
    op, backend = name.split(":")
    cache, lock = folder / f"{op}_{backend}.json", folder / f"{op}_{backend}.toml"
    flashinfer.autotuner.AutoTuner.get().clear_cache()
    with flashinfer.autotune(True, cache=str(cache)):
        _call(flashinfer, torch, op, backend, *_operands(torch, op, ROWS, *PINNED))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fi_patches",
            "pins",
            "record",
            "--from",
            str(cache),
            "--out",
            str(lock),
        ],
        check=True,
        capture_output=True,
    )
    return lock


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=101)
    parser.add_argument(
        "--warm-calls",
        type=int,
        default=WARM_CALLS,
        help=f"untimed calls before each timed batch (default {WARM_CALLS})",
    )
    parser.add_argument(
        "--out", default=None, help="folder for the lockfiles (default: a temp one)"
    )
    parser.add_argument(
        "--ops",
        default=",".join(OPS),
        help=f"comma-separated op:backend pairs to measure, of {', '.join(OPS)} (default: all)",
    )
    args = parser.parse_args()
    ops = [name for name in args.ops.split(",") if name]
    unknown = [name for name in ops if name not in OPS]
    if not ops:
        parser.error("--ops names no op")
    if unknown:
        parser.error(f"--ops: {', '.join(unknown)} is not one of {', '.join(OPS)}")
    warm = args.warm_calls

    import flashinfer
    import torch
    from class_changes import floor_valid_tactics  # benchmarks/ is this script's first path entry

    import fi_patches

    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 0
    folder = Path(args.out or tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"FlashInfer {flashinfer.__version__}, {torch.cuda.get_device_name()}, get_valid_tactics "
        f"of each op's runner at {ROWS} rows, thread CPU time, {args.rounds} alternating rounds, "
        f"{warm} untimed calls before each batch; us: best round; ratio: median of "
        "per-round ratios (verdict)"
    )
    print(f"{'op':<18}{'runner':<26}{'case':<10}{'stock us':>10}{'pinned us':>11}{'ratio':>8}  ok")
    for name in ops:
        op, backend = name.split(":")
        try:
            lock = _lockfile(flashinfer, torch, name, folder)
            table = fi_patches.PinTable.from_file(lock)
            runner, pinned = _handed(flashinfer, torch, op, backend, *PINNED)
            _, unpinned = _handed(flashinfer, torch, op, backend, *UNPINNED)
        except Exception as exc:
            print(f"{name:<18}{'-':<26}{'-':<10}  not measured: {type(exc).__name__}: {exc}"[:300])
            continue
        stock_list = list(runner.get_valid_tactics(pinned, None))
        with fi_patches.pinned_tactics(table):
            offered = list(runner.get_valid_tactics(pinned, None))
            probe = _probe(type(runner).__name__, len(unpinned))
        number = max(1, int(BATCH_S / max(1e-7, _once(runner, pinned))))
        for case, inputs, target in (
            ("pinned", pinned, TARGET_PINNED),
            ("unpinned", unpinned, TARGET_UNPINNED),
        ):
            stock, ours, ratios = float("inf"), float("inf"), []
            least, floor_ratios = float("inf"), []
            for _ in range(args.rounds):
                s = _timed(runner, inputs, number, warm)
                with fi_patches.pinned_tactics(table):
                    o = _timed(runner, inputs, number, warm)
                stock, ours = min(stock, s), min(ours, o)
                ratios.append(o / s)
                if case == "unpinned":
                    with floor_valid_tactics(type(runner), *probe):
                        f = _timed(runner, inputs, number, warm)
                    least = min(least, f)
                    floor_ratios.append(f / s)
            ratio = statistics.median(ratios)
            ok = "yes" if ratio <= target else "NO"
            print(
                f"{name:<18}{type(runner).__name__:<26}{case:<10}{stock * 1e6:>10.2f}"
                f"{ours * 1e6:>11.2f}{ratio:>8.3f}  {ok} (<= {target:.2f})"
            )
            if floor_ratios:
                print(
                    f"{name:<18}{type(runner).__name__:<26}{FLOOR:<10}{stock * 1e6:>10.2f}"
                    f"{least * 1e6:>11.2f}{statistics.median(floor_ratios):>8.3f}  "
                    f"- (reference: inputs[{probe[0]}].shape in a set, then FlashInfer's method)"
                )
        for label, weight in (("pinned", PINNED), ("unpinned", UNPINNED)):
            _serving_rows(
                fi_patches, flashinfer, torch, name, table, weight, label, args.rounds, warm
            )
        print(
            f"{'':<18}{'':<26}offered in the block for the pinned key: {len(offered)} of "
            f"{len(stock_list)} stock tactics ({len(table.entries('pin'))} [[pin]] entries)"
        )
        print(f"{'':<18}{'':<26}{_version_tags(type(runner))}", flush=True)
    return 0


def _version_tags(runner_class: type) -> str:
    """CPython's type version tags of FlashInfer's tuner and of the runner's class after the
    rows so far. Every block entered and left changes those classes; from Python 3.13 a class
    changed about a thousand times gets tag 0 and is never specialized again, so the rows after
    that point measure FlashInfer's code unspecialized, stock and every mode alike."""
    from class_changes import type_tag  # benchmarks/ is this script's first path entry
    from flashinfer.autotuner import AutoTuner

    try:
        tags = [type_tag(c) for c in (AutoTuner, runner_class)]
    except Exception as exc:  # an interpreter built without the test API
        return f"type version tags: not read ({type(exc).__name__})"
    gone = [n for n, t in zip(("AutoTuner", runner_class.__name__), tags, strict=True) if not t]
    state = f"0 for {', '.join(gone)}: no longer specialized" if gone else "both still valid"
    return f"type version tags of AutoTuner, {runner_class.__name__}: {tags} ({state})"


def _serving_rows(
    fi_patches: Any,
    flashinfer: Any,
    torch: Any,
    name: str,
    table: Any,
    weight: tuple[int, int],
    label: str,
    rounds: int,
    warm: int,
) -> None:
    """Host time of a whole serving call of ``name`` for ``weight`` (the lockfile's pinned one or
    another), stock vs each serving mode; preseed only serves pinned keys differently, so it is
    measured for the pinned weight alone. Each round runs stock and every mode once, in an order
    of its own (so no mode always runs first or last); the verdict is the median of per-round
    ratios against the same round's stock."""
    import threading

    from class_changes import bare_search_cache  # benchmarks/ is this script's first path entry

    op, backend = name.split(":")
    a, w = _operands(torch, op, ROWS, *weight)
    calls = max(1, int(BATCH_S / max(1e-7, _once_call(flashinfer, torch, op, backend, a, w))))
    modes = [m for m in SERVING_MODES if not (m == "preseed" and label == "unpinned")]
    modes += [IDLE_THREAD, FLOOR]
    stock_rounds: list[float] = []
    timings: dict[str, list[float]] = {m: [] for m in modes}
    entered, leave = threading.Event(), threading.Event()

    def hold(block: bool) -> None:
        if not block:
            entered.set()
            leave.wait()
            return
        with fi_patches.pinned_tactics(table):
            entered.set()
            leave.wait()

    def timed() -> float:
        return _timed_calls(flashinfer, torch, op, backend, a, w, calls, warm)

    order = random.Random(rounds)  # each round runs stock and the modes in its own order
    for _ in range(rounds):
        for mode in order.sample(["stock", *modes], len(modes) + 1):
            if mode == "stock":
                stock_rounds.append(timed())
            elif mode == "process-wide":
                fi_patches.register_pins(table)
                fi_patches.enable()
                try:
                    timings[mode].append(timed())
                finally:
                    fi_patches.disable()
                    fi_patches.register_pins(None)
            elif mode in ("other thread", IDLE_THREAD):
                holder = threading.Thread(target=hold, args=(mode != IDLE_THREAD,))
                holder.start()
                entered.wait()
                try:
                    timings[mode].append(timed())
                finally:
                    leave.set()
                    holder.join()
                    entered.clear()
                    leave.clear()
            elif mode == FLOOR:
                with bare_search_cache():
                    timings[mode].append(timed())
            else:
                with fi_patches.pinned_tactics(table, mode=mode):
                    timings[mode].append(timed())
    for mode, values in timings.items():
        ratio = statistics.median(o / s for o, s in zip(values, stock_rounds, strict=True))
        verdict = "- (reference: stock)" if mode == IDLE_THREAD else "- (reference: floor)"
        if mode not in (IDLE_THREAD, FLOOR):
            ok = "yes" if ratio <= TARGET_SERVING else "NO"
            verdict = f"{ok} (<= {TARGET_SERVING:.2f})"
        print(
            f"{name:<18}{op + ' call, ' + label:<26}{mode:<13}{min(stock_rounds) * 1e6:>8.2f}"
            f"{min(values) * 1e6:>11.2f}{ratio:>8.3f}  {verdict}",
            flush=True,
        )


def _once(runner: Any, inputs: Any) -> float:
    start = time.perf_counter()
    runner.get_valid_tactics(inputs, None)
    return time.perf_counter() - start


def _once_call(flashinfer: Any, torch: Any, op: str, backend: str, a: Any, w: Any) -> float:
    _call(flashinfer, torch, op, backend, a, w)
    torch.cuda.synchronize()
    start = time.perf_counter()
    _call(flashinfer, torch, op, backend, a, w)
    took = time.perf_counter() - start
    torch.cuda.synchronize()
    return took


def _timed_calls(
    flashinfer: Any, torch: Any, op: str, backend: str, a: Any, w: Any, number: int, warm: int
) -> float:
    """Host CPU time per call of ``number`` serving calls after ``warm`` untimed ones (the GPU
    drained before and after)."""
    for _ in range(warm):
        _call(flashinfer, torch, op, backend, a, w)
    torch.cuda.synchronize()
    clock = timeit.Timer(
        lambda: _call(flashinfer, torch, op, backend, a, w), timer=time.thread_time
    )
    took = clock.timeit(number=number) / number
    torch.cuda.synchronize()
    return took


def _probe(runner_name: str, count: int) -> tuple[int, frozenset[Any]]:
    """The input fi_patches' wrapper reads for a call of ``count`` inputs, and the shapes it
    tests (read inside a block: :func:`fi_patches.pinning.stack.probe_cell`); the weight
    (input 1) and no shape where the block has no probe of that length."""
    from fi_patches.pinning.stack import probe_cell

    found = probe_cell(runner_name).get(count)
    if found is None or found[1] is None:
        return 1, frozenset()
    return found[0], found[1]


def _timed(runner: Any, inputs: Any, number: int, warm: int) -> float:
    for _ in range(warm):
        runner.get_valid_tactics(inputs, None)
    clock = timeit.Timer(lambda: runner.get_valid_tactics(inputs, None), timer=time.thread_time)
    return clock.timeit(number=number) / number


if __name__ == "__main__":
    status = main()
    # Leave without the interpreter's teardown, where nanobind reports the cuDNN frontend's
    # objects still alive at exit at such length that the table scrolls out of the tail of a
    # captured output.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
