"""What pinning costs: the low-latency runner's ``get_valid_tactics`` stock vs inside
``pinned_tactics()`` (pinned and unpinned problems), pinned by its ``[[low_latency]]`` section
and by a ``[[pin]]`` entry (the engine's form for any op), under process-wide pins, and with
another thread's block open; FlashInfer's tuner lookup while serving (``choose_one`` outside
tuning, what every call of a tuned op makes) of a pinned and an unpinned key, stock vs under
process-wide pins, inside a narrowing and a preseed block, and with another thread's block open
(the tests' op, ``tests/toy_op.py``, on FlashInfer's real tuner); entering and leaving a block
of a 1,000-entry lockfile; and the cost of ``import fi_patches``. Every row with a target prints
its verdict (issue 30's targets for the lookup and ``get_valid_tactics``); the "floor" rows time
the least any wrapper costs (one that only calls FlashInfer), for reference, and the least a
design that answers serving calls in ``choose_one`` alone would cost a thread without pins while
another holds a block (one wrapper that reads its context, ``search_cache`` stock).

Runs on CPU with the real FlashInfer (targets sm_103 offline through FI_PATCHES_DEVICE). Where
``pinned_tactics`` is disabled (no CuTe DSL, as on the lent Hopper GPU's host), the
``get_valid_tactics`` rows are skipped, with the reason, and the lookup rows run, their "another
op" row under a ``[[pin]]`` of another op.
Ratios are against stock FlashInfer measured in the same run, in this thread's CPU time, over
many short rounds, each batch after 200 untimed calls (on a shared 2-core VM, batches of
2,000 calls moved a verdict by up to 0.07 between runs, batches of 200 by under 0.01).
    python benchmarks/pinning_overhead.py [--repeat 151] [--number 200]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.toy_op
os.environ.setdefault("FI_PATCHES_DEVICE", "sm_103")

TARGET_UNPINNED = 1.05
TARGET_PINNED = 1.00
TARGET_OTHER_THREAD = 1.02
TARGET_IMPORT_MS = 20.0
WARM_CALLS = 200
"""Untimed calls before each timed batch (of stock and patched runs alike). Entering a mode
installs wrappers and leaving it removes them; FlashInfer's stock lookup takes about 120 calls
to be steady again after such a change (``benchmarks/class_changes.py``, Python 3.11), so with
fewer, every mode's batch would time part of that transient and only some stock batches would.
It was 50 until 2026-12-06 (``benchmarks/pinning_overhead_hopper.py`` waits 200 too)."""


def inputs(n: int, k: int, rows: int) -> list:
    import torch

    a = torch.empty(rows, k, dtype=torch.float8_e4m3fn)
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn).t()
    return [
        a,
        b,
        torch.empty(128 * k // 32, dtype=torch.uint8),
        torch.empty(n * k // 32, dtype=torch.uint8),
        torch.bfloat16,
        torch.empty(rows, n, dtype=torch.bfloat16),
        torch.empty(1024, dtype=torch.uint8),
    ]


def import_ms(runs: int) -> tuple[float, list[str]]:
    code = (
        "import sys, time; t = time.perf_counter(); import fi_patches; "
        "d = time.perf_counter() - t; "
        "print(d * 1e3, ','.join(m for m in ('torch', 'flashinfer', 'cutlass') if m in sys.modules))"
    )
    times: list[float] = []
    loaded: set[str] = set()
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        ms, mods = [*out.stdout.strip().split(" "), ""][:2]
        times.append(float(ms))
        loaded.update(m for m in mods.split(",") if m)
    return statistics.median(times), sorted(loaded)


TARGET_LOOKUP = {
    "process-wide pins, pinned key": 1.01,
    "process-wide pins, unpinned key": None,
    "process-wide low_latency pins, another op": None,
    "process-wide pins of another op only": None,
    "narrowing block, pinned key": 1.05,
    "narrowing block, unpinned key": 1.05,
    "narrowing block, an op no entry pins": None,
    "preseed block, pinned key": 1.00,
    "no pins in this thread, wrappers installed": 1.02,
    "floor: search_cache wrapper doing nothing": None,
    "floor: choose_one wrapper reading the context": None,
    "stock, another thread waiting (reference)": None,
}
"""Targets of the serving lookup, as ratios against stock in the same round (issue 30)."""
IDLE_THREAD_ROW = "stock, another thread waiting (reference)"
"""No wrapper installed while another thread waits as the holder of the "no pins in this
thread" row does, without a block: what a second thread alone costs this one."""


def lookup_rows(repeat: int, number: int, timed: Any, any_op: Any, any_op_row: str) -> None:
    """The serving lookup (``choose_one`` outside tuning, what every call of a tuned op makes),
    stock vs each mode that serves it: process-wide pins (``fi_patches.enable()`` with the
    table registered, as ``FI_PATCHES_PINS`` and the vLLM/SGLang plugins run), a narrowing
    block, a preseed block, and another thread holding a block (none in this thread). The tests'
    op (``tests/toy_op.py``) is tuned stock on FlashInfer's real tuner; the table pins one
    weight's 8-row key to a tactic other than FlashInfer's cached winner (so each row checks
    that the pin is served), the other weight's tuned key is the unpinned one. Each round runs
    stock and every mode once, in an order of its own (no mode always first or last), and a
    reference row times stock beside a waiting thread; the verdict is the median of per-round
    ratios against the same round's stock. ``any_op`` is a table that pins another op, timed
    process-wide as row ``any_op_row``: the lookup of an op it does not pin (a server's every
    other tuned op). Where the CuTe DSL runs it is a ``[[low_latency]]`` section (which serves
    any op, so the lookup takes the reach test), elsewhere a ``[[pin]]`` of another op."""
    import flashinfer
    import pytest
    from class_changes import bare_search_cache  # benchmarks/ is this script's first path entry
    from flashinfer.autotuner import AutoTuner

    import fi_patches
    from fi_patches.pinning import stack
    from tests import toy_op, toy_pins

    monkeypatch = pytest.MonkeyPatch()
    rounds: dict[str, list[float]] = {}
    try:
        toy_op.start(monkeypatch, 1)  # FlashInfer's tuner, profiling simulated on CPU
        with flashinfer.autotune(True):
            toy_op.warm_up()
        pinned_n, unpinned_n = toy_op.WEIGHTS
        runners, config = toy_op.runners(), toy_op.config()
        pinned_inputs = list(toy_op.operands(8, pinned_n))
        unpinned_inputs = list(toy_op.operands(8, unpinned_n))
        tuner = AutoTuner.get()

        def lookup(inputs: list[Any]) -> Any:
            return lambda: tuner.choose_one(toy_op.OP, runners, config, inputs)

        pinned, unpinned = lookup(pinned_inputs), lookup(unpinned_inputs)
        other_op = f"{toy_op.OP}_unpinned"  # another tuned op: its lookup misses FlashInfer's cache

        def unpinned_op() -> Any:
            return tuner.choose_one(other_op, runners, config, pinned_inputs)

        winner = pinned()[1]
        other = next(t for t in ((8, 2), (8, 3), (16, 2)) if t != winner)
        # The pin differs from FlashInfer's cached winner, so every row shows the pin served.
        table = fi_patches.PinTable.from_mapping(
            {
                "meta": {"device": "*", "flashinfer": ""},
                "pin": [
                    {
                        "op": toy_op.OP,
                        "runner": "ToyTileRunner",
                        "shapes": [["rows", toy_op.K], [toy_op.K, pinned_n]],
                        "min_rows": 5,
                        "max_rows": 8,
                        "tactic": list(other),
                        "extras": "(torch.float32,)",
                    }
                ],
            },
            source="<benchmark>",
        )
        stock_search_cache = vars(AutoTuner)["search_cache"]

        entered, leave = threading.Event(), threading.Event()

        def hold(block: bool) -> None:
            if not block:
                entered.set()
                leave.wait()
                return
            with fi_patches.pinned_tactics(table):
                entered.set()
                leave.wait()

        def keep(name: str, value: float) -> None:
            rounds.setdefault(name, []).append(value)

        def floor_row() -> None:
            # For reference: the least any wrapper of FlashInfer's lookup costs (installed only
            # here, between the rounds' blocks): FlashInfer's parameters, it calls FlashInfer.
            with bare_search_cache():
                keep("floor: search_cache wrapper doing nothing", timed(pinned))

        stock_choose_one = vars(AutoTuner)["choose_one"]
        serving, context, plain = stack.SERVING, stack.CONTEXT, stack.PLAIN
        here, in_force = stack.scope, stack.current_index

        def context_choose_one(
            self: Any, custom_op: Any, runners: Any, tuning_config: Any, inputs: Any, **kwargs: Any
        ) -> Any:
            # For reference: the least a design that answers serving calls in choose_one alone
            # (search_cache left stock outside tuning) would cost a thread without pins while
            # another holds a block: one wrapper that reads its context and calls FlashInfer.
            if not self.is_tuning_mode and not kwargs:
                index = serving[0]
                if index is context:
                    index = here().index if plain[0] else in_force()
                if index is None:
                    return stock_choose_one(self, custom_op, runners, tuning_config, inputs)
            return stock_choose_one(self, custom_op, runners, tuning_config, inputs, **kwargs)

        def process_wide() -> None:
            with toy_pins.serving(table, "process"):  # as FI_PATCHES_PINS runs
                assert pinned()[1] == other
                keep("process-wide pins, pinned key", timed(pinned))
                keep("process-wide pins, unpinned key", timed(unpinned))

        def process_wide_section() -> None:
            with toy_pins.serving(any_op, "process"):
                assert stack.current_index() is not None
                keep(any_op_row, timed(pinned))

        def narrowing() -> None:
            with fi_patches.pinned_tactics(table):
                assert pinned()[1] == other
                keep("narrowing block, pinned key", timed(pinned))
                keep("narrowing block, unpinned key", timed(unpinned))
                keep("narrowing block, an op no entry pins", timed(unpinned_op))

        def preseed() -> None:
            with fi_patches.pinned_tactics(table, mode="preseed"):
                assert pinned()[1] == other
                keep("preseed block, pinned key", timed(pinned))

        def beside(name: str, block: bool, tuner_methods: dict[str, Any] | None = None) -> None:
            """Time ``name`` while another thread waits (in a block if ``block``), with
            ``tuner_methods`` set on ``AutoTuner`` for the timing only (over that block's
            wrappers), then restored."""
            holder = threading.Thread(target=hold, args=(block,))
            holder.start()
            entered.wait()
            saved = {attr: vars(AutoTuner)[attr] for attr in tuner_methods or {}}
            try:
                for attr, method in (tuner_methods or {}).items():
                    setattr(AutoTuner, attr, method)
                keep(name, timed(pinned))
            finally:
                for attr, method in saved.items():
                    setattr(AutoTuner, attr, method)
                leave.set()
                holder.join()
                entered.clear()
                leave.clear()

        def stock() -> None:
            keep("stock pinned", timed(pinned))
            keep("stock unpinned", timed(unpinned))
            keep("stock, an op no entry pins", timed(unpinned_op))

        steps = [
            stock,
            floor_row,
            lambda: beside(
                "floor: choose_one wrapper reading the context",
                True,
                {"choose_one": context_choose_one, "search_cache": stock_search_cache},
            ),
            process_wide,
            process_wide_section,
            narrowing,
            preseed,
            lambda: beside("no pins in this thread, wrappers installed", True),
            lambda: beside(IDLE_THREAD_ROW, False),
        ]
        order = random.Random(repeat)  # each round runs the steps in an order of its own
        for _ in range(repeat):
            for step in order.sample(steps, len(steps)):
                step()
    finally:
        monkeypatch.undo()
    print(
        f"FlashInfer {flashinfer.__version__}, serving lookup (AutoTuner.choose_one outside "
        f"tuning, the tests' op on the real tuner), thread CPU time, {repeat} alternating rounds "
        f"of {number} calls"
    )
    print(
        f"{'case':<46}{'stock us':>10}{'fi_patches us':>15}{'best':>7}{'median':>8}{'target':>9}  ok"
    )
    for name, target in TARGET_LOOKUP.items():
        if name not in rounds:  # the other form of the "another op" row
            continue
        base = rounds[
            "stock, an op no entry pins"
            if name == "narrowing block, an op no entry pins"
            else "stock unpinned"
            if "unpinned" in name
            else "stock pinned"
        ]
        ours = rounds[name]
        ratio = statistics.median(o / s for o, s in zip(ours, base, strict=True))
        limit = "-" if target is None else "<=" + format(target, ".2f")
        ok = "-" if target is None else "yes" if ratio <= target else "NO"
        print(
            f"{name:<46}{min(base):>10.2f}{min(ours):>15.2f}{min(ours) / min(base):>7.2f}"
            f"{ratio:>8.3f}{limit:>9}  {ok}"
        )


def timer(number: int) -> Any:
    """``timed(fn)``: microseconds per call of ``fn`` over a batch of ``number`` calls, in this
    thread's CPU time (the calls' own work, not time descheduled by other load), after
    :data:`WARM_CALLS` untimed calls (on every side alike: entering a block installs wrappers,
    class attributes change and CPython re-specializes the call sites once; the rows measure the
    steady per-call cost a server pays, not that one-time cost)."""

    def timed(fn: Any) -> float:
        for _ in range(WARM_CALLS):
            fn()
        clock = timeit.Timer(fn, timer=time.thread_time)
        return clock.timeit(number=number) / number * 1e6

    return timed


def valid_tactics_rows(repeat: int, number: int, timed: Any, flashinfer_version: str) -> Any:
    """The low-latency runner's ``get_valid_tactics`` rows (they need the CuTe DSL), printed;
    returns the ``[[low_latency]]`` table they pinned, for :func:`lookup_rows`."""
    import cutlass  # noqa: F401  (imported by the runner; keep it out of the timings)
    from class_changes import floor_valid_tactics  # benchmarks/ is this script's first path entry
    from flashinfer.gemm import gemm_base

    import fi_patches
    from tests import toy_pins

    runner: Any = gemm_base._cutedsl_low_latency_blockscaled_gemm_runner(103, True)
    n, k = 7168, 1536
    pinned_inputs, unpinned_inputs = inputs(n, k, 8), inputs(1536, 7168, 8)
    stock_list = runner.get_valid_tactics(pinned_inputs, None)
    pin = next(t for t in stock_list[1:] if t[3] == 1)
    table = fi_patches.PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ""},
            "low_latency": [{"n": n, "k": k, "min_rows": 5, "max_rows": 8, "tactic": list(pin)}],
        },
        source="<benchmark>",
    )

    generic = fi_patches.PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ""},
            "pin": [
                {
                    "op": "mxfp8_gemm",
                    "runner": type(runner).__name__,
                    "shapes": [["rows", k], [k, n], ["*"], ["*"], [0], ["*", n], ["*"]],
                    "min_rows": 5,
                    "max_rows": 8,
                    "tactic": list(pin),
                }
            ],
        },
        source="<benchmark [[pin]]>",
    )

    def call(inp):
        return lambda: runner.get_valid_tactics(inp, None)

    # The floor row: the least any wrapper of the method costs (FlashInfer's parameters, the
    # weight's shape tested against a set, then FlashInfer's method), installed around its batch.
    pinned_shapes = frozenset({pinned_inputs[1].shape})

    # Wrappers installed (another thread holds pins), this thread has none: the fast path.
    entered, leave = threading.Event(), threading.Event()

    def hold():
        with fi_patches.pinned_tactics(table):
            entered.set()
            leave.wait()

    # Stock and patched runs alternate, round by round, and each keeps its best round, so
    # load on the machine shifts both sides alike; the verdict is the median, over rounds, of
    # each round's ratio against the stock run of the same round.
    best: dict[str, float] = {}
    rounds: dict[str, list[float]] = {}

    def keep(name: str, value: float) -> None:
        best[name] = min(best.get(name, float("inf")), value)
        rounds.setdefault(name, []).append(value)

    for _ in range(repeat):
        keep("stock pinned", timed(call(pinned_inputs)))
        keep("stock unpinned", timed(call(unpinned_inputs)))
        with fi_patches.pinned_tactics(table):
            assert runner.get_valid_tactics(pinned_inputs, None) == [pin]
            keep("in pinned", timed(call(pinned_inputs)))
            keep("in unpinned", timed(call(unpinned_inputs)))
        with fi_patches.pinned_tactics(generic):
            assert runner.get_valid_tactics(pinned_inputs, None) == [pin]
            keep("pin pinned", timed(call(pinned_inputs)))
            keep("pin unpinned", timed(call(unpinned_inputs)))
        with toy_pins.serving(table, "process"):  # as FI_PATCHES_PINS and the plugins run
            assert runner.get_valid_tactics(pinned_inputs, None) == [pin]
            keep("process pinned", timed(call(pinned_inputs)))
            keep("process unpinned", timed(call(unpinned_inputs)))
        with floor_valid_tactics(type(runner), 1, pinned_shapes):
            keep("floor unpinned", timed(call(unpinned_inputs)))
        holder = threading.Thread(target=hold)
        holder.start()
        entered.wait()
        keep("other thread", timed(call(pinned_inputs)))
        leave.set()
        holder.join()
        entered.clear()
        leave.clear()
    stock_pinned, stock_unpinned = best["stock pinned"], best["stock unpinned"]
    in_pinned, in_unpinned, other_thread = (
        best["in pinned"],
        best["in unpinned"],
        best["other thread"],
    )

    def paired(ours: str, stock: str) -> float:
        return statistics.median(o / s for o, s in zip(rounds[ours], rounds[stock], strict=True))

    rows = [
        (
            "pinned problem (7168x1536, 8 rows)",
            stock_pinned,
            in_pinned,
            paired("in pinned", "stock pinned"),
            TARGET_PINNED,
        ),
        (
            "unpinned problem (1536x7168, 8 rows)",
            stock_unpinned,
            in_unpinned,
            paired("in unpinned", "stock unpinned"),
            TARGET_UNPINNED,
        ),
        (
            "[[pin]] pinned problem (7168x1536, 8 rows)",
            stock_pinned,
            best["pin pinned"],
            paired("pin pinned", "stock pinned"),
            TARGET_PINNED,
        ),
        (
            "[[pin]] unpinned problem (1536x7168, 8 rows)",
            stock_unpinned,
            best["pin unpinned"],
            paired("pin unpinned", "stock unpinned"),
            TARGET_UNPINNED,
        ),
        (
            "process-wide pins, pinned problem",
            stock_pinned,
            best["process pinned"],
            paired("process pinned", "stock pinned"),
            TARGET_PINNED,
        ),
        (
            "process-wide pins, unpinned problem",
            stock_unpinned,
            best["process unpinned"],
            paired("process unpinned", "stock unpinned"),
            TARGET_UNPINNED,
        ),
        (
            "no pins in this thread, wrappers installed",
            stock_pinned,
            other_thread,
            paired("other thread", "stock pinned"),
            TARGET_OTHER_THREAD,
        ),
        (
            "floor: one shape read and a set test (reference)",
            stock_unpinned,
            best["floor unpinned"],
            paired("floor unpinned", "stock unpinned"),
            None,
        ),
    ]

    print(
        f"FlashInfer {flashinfer_version}, low-latency runner get_valid_tactics, "
        f"thread CPU time, {repeat} alternating rounds of {number} calls; us: best "
        "round; ratios: of the best rounds, and the median of per-round ratios (verdict)"
    )
    print(
        f"{'case':<46}{'stock us':>10}{'fi_patches us':>15}{'best':>7}{'median':>8}{'target':>9}  ok"
    )
    for name, stock, ours, ratio, target in rows:
        limit = "-" if target is None else "<=" + format(target, ".2f")
        ok = "-" if target is None else "yes" if ratio <= target else "NO"
        print(
            f"{name:<46}{stock:>10.2f}{ours:>15.2f}{ours / stock:>7.2f}{ratio:>8.3f}"
            f"{limit:>9}  {ok}"
        )
    print()
    return table


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=151)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args()

    import fi_patches
    from fi_patches.compat import status_of
    from tests.toy_op import decoy_pins

    timed = timer(args.number)
    record = status_of("pinned_tactics")
    if record.enabled:
        any_op = valid_tactics_rows(args.repeat, args.number, timed, record.flashinfer)
        any_op_row = "process-wide low_latency pins, another op"
    else:  # a host without the CuTe DSL (a Hopper GPU's): the lookup rows alone
        print(f"get_valid_tactics rows not measured: pinned_tactics is disabled ({record.reason})")
        print()
        any_op = fi_patches.PinTable.from_mapping(
            {"meta": {"device": "*", "flashinfer": ""}, "pin": decoy_pins(1)},
            source="<benchmark, another op>",
        )
        any_op_row = "process-wide pins of another op only"
    lookup_rows(args.repeat, args.number, timed, any_op, any_op_row)
    lockfile = fi_patches.PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": ""},
            "pin": decoy_pins(1000),
        },
        source="<benchmark 1000 entries>",
    )

    with fi_patches.pinned_tactics(lockfile):  # checked once; every later entry reuses that
        pass
    enter_exit = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        for _ in range(20):
            with fi_patches.pinned_tactics(lockfile):
                pass
        enter_exit.append((time.perf_counter() - start) / 20 * 1e3)
    print()
    print(
        f"{'pinned_tactics() enter+exit, 1,000-entry lockfile':<46}"
        f"{statistics.median(enter_exit):>10.2f} ms   (median of {args.repeat} rounds of 20)"
    )
    ms, loaded = import_ms(15)
    print()
    print(
        f"{'import fi_patches (median of 15 processes)':<46}{ms:>10.2f} ms   target <= {TARGET_IMPORT_MS:.0f} ms  "
        f"{'yes' if ms <= TARGET_IMPORT_MS else 'NO'}"
    )
    print(
        f"{'modules loaded by it among torch/flashinfer/cutlass':<46}{(', '.join(loaded) or 'none'):>10}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
