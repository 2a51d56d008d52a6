"""Host cost of ``fi_patches.mxfp8.mm``'s routing per call, on every route, as ratios against
direct calls measured in the same run (target <= 1.02x each):

* every route against calling ``mm_mxfp8`` directly for the same rows: with the route's own
  backend for low-latency (4 rows) and stock (200 rows, no pin); with ``backend="cute-dsl"``
  (what those rows get without fi_patches) for wide and pinned cute-dsl;
* the wide and pinned cute-dsl routes also against calling their kernel directly, the strict
  measure of routing: ``launch_wide`` on the same compiled kernel (20 rows, a ``[[wide]]`` pin
  for tile 32) and ``pinned_mm`` with the same pin (100 rows, a ``[[cute_dsl]]`` pin). Every
  call gets the same inputs, the ``(K, N)`` weight view ``mm_mxfp8`` takes; ``launch_wide``
  takes the ``(N, K)`` weight, so its caller transposes the view, while the wide route runs
  its shape's launch plan (checked once per shape, like ``launch_wide``'s) on the view as is.

On CPU this runs FlashInfer's real host path under the tests' simulation of an sm_103 device
(``tests/simulation.py``); each call stops where its kernel launch fails (the routed call and
the call its route makes must fail alike, checked before timing), so what is timed is Python
bookkeeping plus the host work of the call, which is what routing must not show up next to.
Per case, ``--rounds`` pairs of adjacent batches of ``--number`` calls, the order swapped every
round, timed in this thread's CPU time (time descheduled by other load is not host work); the
verdict is the median of the per-round ratios (the best rounds are printed too). Many short
rounds: on a shared 2-core VM the reference row's ratio moved by up to 6% between runs with
batches of 200 calls, by about 2% with batches of 20. A last row, for reference, times the least any router written in
Python costs: a function that finds the two tensors' shapes in a dict (a hit, as ``mm``'s memo
gives) before making the direct call.
Run from the repository root:
    python benchmarks/dispatch_overhead.py [--rounds 501] [--number 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("FI_PATCHES_DEVICE", "sm_103")
os.environ["FI_PATCHES_CACHE_DIR"] = "off"  # the simulation changes torch.cuda under its key

TARGET = 1.02
N, K = 7168, 1536


def _failure(call) -> str:
    """What ``call`` raises on CPU (its launch), as ``Type: message``; '' when it returns."""
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return ""


def _quiet(call):
    def run():
        # The launch fails on CPU (checked to fail alike on both sides before timing).
        with contextlib.suppress(Exception):
            call()

    return run


def _checked(rows, route, baseline, direct, route_call, table, launched):
    """``(name, baseline, direct, routed)`` ready to time, or None (printed why) when the routed
    call does not fail where the call its route makes fails."""
    from fi_patches.mxfp8 import Route, explain

    chosen = explain(N, K, rows, pins=table)
    assert chosen.route is route, (rows, chosen)
    # Each side's first call chooses its route / builds FlashInfer's runners. A routed call
    # must fail (on CPU) where the call its route makes fails, or the ratio compares different
    # work.
    first_direct, first_routed = _failure(direct), _failure(route_call)
    same_call = baseline in launched or route in (Route.LOW_LATENCY, Route.STOCK)
    if same_call and first_direct != first_routed:
        print(f"{rows} rows: {baseline} raised {first_direct!r}, mm raised {first_routed!r}")
        return None
    return (f"{rows} rows, {route.value}", baseline, _quiet(direct), _quiet(route_call))


def _floor(t, flashinfer):
    """The least a router written in Python costs: a function taking the call's tensors that
    finds their shapes in a dict, then makes the direct call (called as ``mm`` is)."""
    memo: dict = {(t["a"].shape, t["b"].shape): "cute-dsl"}

    def route(a, b, b_scale, *, x_scale, out, backend):
        memo.get((a.shape, b.shape))
        return flashinfer.mm_mxfp8(a, b, x_scale, b_scale, out=out, backend=backend)

    return lambda: route(
        t["a"], t["b"], t["b_scale"], x_scale=t["a_scale"], out=t["out"], backend="cute-dsl"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=501)
    parser.add_argument("--number", type=int, default=20)
    args = parser.parse_args()

    import pytest
    import torch

    from tests import simulation

    simulation.install(pytest.MonkeyPatch())  # SIMULATION: device-only helpers on CPU
    import flashinfer

    from fi_patches.compat import refresh, status_of
    from fi_patches.cute_dsl import pinned_mm
    from fi_patches.mxfp8 import Route, _wide_kernel, explain, mm
    from fi_patches.pins import PinTable
    from fi_patches.wide.launch import launch_wide
    from fi_patches.wide.tactics import wide_tactics
    from tests import cutedsl
    from tests.mxfp8_inputs import Mxfp8Problem

    refresh()
    off = [
        r for r in ("pinned_tactics", "pinned_cute_dsl", "wide_tile") if not status_of(r).enabled
    ]
    if off:
        print(f"{off[0]} is disabled here: {status_of(off[0]).reason}")
        return 0
    cute = next(t for t in cutedsl.stock(N, K, 128)[2:] if t[4] == 1)
    table = PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
            "wide": [{"n": N, "k": K, "tile": 32, "tactic": list(wide_tactics(N, K, 32)[1])}],
            "cute_dsl": [cutedsl.entry(N, K, 65, 128, cute)],
        },
        source="<benchmark>",
    )

    def tensors(rows):
        t = Mxfp8Problem(N, K, rows).tensors()
        t["out"] = torch.empty(rows, N, dtype=torch.bfloat16)
        return t

    def routed(t, backend="auto"):
        return lambda: mm(
            t["a"],
            t["b"],
            t["b_scale"],
            x_scale=t["a_scale"],
            pins=table,
            out=t["out"],
            stock_backend=backend,
        )

    def direct_mm(t, backend):
        return lambda: flashinfer.mm_mxfp8(
            t["a"], t["b"], t["a_scale"], t["b_scale"], out=t["out"], backend=backend
        )

    t4, t20, t100, t200 = (tensors(r) for r in (4, 20, 100, 200))
    kernel = _wide_kernel(explain(N, K, 20, pins=table))  # compiled once, as mm's route does
    launched = {
        "launch_wide(same kernel)": lambda: launch_wide(
            kernel, t20["b"].t(), t20["b_scale"], t20["a"], t20["a_scale"], t20["out"]
        ),
        "pinned_mm(same pin)": lambda: pinned_mm(
            t100["a"], t100["a_scale"], t100["b"], t100["b_scale"], out=t100["out"], pins=table
        ),
    }
    cases = [  # (rows, route, direct call's name, direct call, routed call)
        (
            4,
            Route.LOW_LATENCY,
            "mm_mxfp8(cutedsl_low_latency)",
            direct_mm(t4, "cutedsl_low_latency"),
            routed(t4),
        ),
        (20, Route.WIDE, "mm_mxfp8(cute-dsl)", direct_mm(t20, "cute-dsl"), routed(t20)),
        (
            20,
            Route.WIDE,
            "launch_wide(same kernel)",
            launched["launch_wide(same kernel)"],
            routed(t20),
        ),
        (
            100,
            Route.PINNED_CUTE_DSL,
            "mm_mxfp8(cute-dsl)",
            direct_mm(t100, "cute-dsl"),
            routed(t100),
        ),
        (
            100,
            Route.PINNED_CUTE_DSL,
            "pinned_mm(same pin)",
            launched["pinned_mm(same pin)"],
            routed(t100),
        ),
        (
            200,
            Route.STOCK,
            "mm_mxfp8(cute-dsl)",
            direct_mm(t200, "cute-dsl"),
            routed(t200, "cute-dsl"),
        ),
    ]
    timed = []
    for rows, route, baseline, direct, route_call in cases:
        timed_case = _checked(rows, route, baseline, direct, route_call, table, launched)
        if timed_case is None:
            return 1
        timed.append((*timed_case, TARGET))
    # The floor of any routing written in Python, for reference (no target): a function that
    # looks a key of the two tensors' shapes up in a dict, then makes the direct call.
    timed.append(
        (
            "200 rows, floor",
            "mm_mxfp8(cute-dsl)",
            _quiet(direct_mm(t200, "cute-dsl")),
            _quiet(_floor(t200, flashinfer)),
            None,
        )
    )

    print(
        f"FlashInfer {status_of('pinned_tactics').flashinfer}, host path per call (launch fails "
        f"on CPU), thread CPU time, {args.rounds} rounds of {args.number} calls per side; us: "
        "best round; ratios: of the best rounds, and the median of per-round ratios (verdict)"
    )
    print(
        f"{'rows, route':<30}{'direct call':<31}{'direct us':>10}{'mm us':>8}{'best':>7}"
        f"{'median':>8}{'target':>8}  ok"
    )

    def clock(call):
        # This thread's CPU time: the host work of the calls, not time spent descheduled by
        # other load on the machine.
        return timeit.Timer(call, timer=time.thread_time)

    for name, baseline, direct, route_call, target in timed:
        best_direct = best_routed = float("inf")
        ratios = []
        for round_ in range(args.rounds):
            # Adjacent batches, their order swapped every round: load on the machine shifts
            # both alike, and the per-round ratio cancels what it shifts.
            pair = (direct, route_call) if round_ % 2 == 0 else (route_call, direct)
            first, second = (clock(f).timeit(number=args.number) for f in pair)
            d, r = (first, second) if round_ % 2 == 0 else (second, first)
            best_direct, best_routed = min(best_direct, d), min(best_routed, r)
            ratios.append(r / d)
        d_us, r_us = best_direct / args.number * 1e6, best_routed / args.number * 1e6
        ratio = statistics.median(ratios)
        ok = "-" if target is None else "yes" if ratio <= target else "NO"
        limit = "-" if target is None else f"<={target:.2f}"
        print(
            f"{name:<30}{baseline:<31}{d_us:>10.1f}{r_us:>8.1f}{r_us / d_us:>7.3f}"
            f"{ratio:>8.3f}{limit:>8}  {ok}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
