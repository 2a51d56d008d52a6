"""Host cost of ``fi_patches.mxfp8.mm``'s routing per call, on every route, against calling
what the route runs directly, as ratios measured in the same run (target <= 1.02x each).

* low-latency (4 rows) and stock (200 rows, no pin) against ``mm_mxfp8`` with that backend;
* pinned cute-dsl (100 rows, a ``[[cute_dsl]]`` pin) against ``pinned_mm`` (the route's own
  call) and, for reference, against ``mm_mxfp8(backend="cute-dsl")``;
* wide (20 rows, a ``[[wide]]`` pin for tile 32) against ``launch_wide`` on the same compiled
  kernel (``mm_mxfp8`` has no wide kernel to compare with).

On CPU this runs FlashInfer's real host path under the tests' simulation of an sm_103 device
(``tests/simulation.py``); both sides stop where the kernel launch fails (each pair must fail
with the same error, checked before timing), so what is timed is Python bookkeeping plus the
host work of the call, which is what routing must not show up next to. Run from the
repository root:
    python benchmarks/dispatch_overhead.py [--rounds 15] [--number 300]
"""

from __future__ import annotations

import argparse
import os
import sys
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
        try:
            call()
        except Exception:
            pass  # the launch, on CPU (checked to be the same on both sides before timing)

    return run


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=300)
    args = parser.parse_args()

    import pytest
    import torch

    from tests import simulation

    simulation.install(pytest.MonkeyPatch())  # SIMULATION: device-only helpers on CPU
    import flashinfer

    from fi_patches.compat import refresh, status_of
    from fi_patches.cute_dsl.pinned_mm import pinned_mm
    from fi_patches.mxfp8 import Route, explain, mm
    from fi_patches.mxfp8.mm import _wide_kernel
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
    cute = [t for t in cutedsl.stock(N, K, 128)[2:] if t[4] == 1][0]
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
        t["w_nk"] = t["b"].t()  # the (N, K) weight launch_wide takes
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
    cases = [
        (
            "4 rows, low-latency",
            "mm_mxfp8(cutedsl_low_latency)",
            direct_mm(t4, "cutedsl_low_latency"),
            routed(t4),
            Route.LOW_LATENCY,
        ),
        (
            "20 rows, wide tile 32",
            "launch_wide(same kernel)",
            lambda: launch_wide(
                kernel, t20["w_nk"], t20["b_scale"], t20["a"], t20["a_scale"], t20["out"]
            ),
            routed(t20),
            Route.WIDE,
        ),
        (
            "100 rows, pinned cute-dsl",
            "pinned_mm(same pin)",
            lambda: pinned_mm(
                t100["a"], t100["a_scale"], t100["b"], t100["b_scale"], out=t100["out"], pins=table
            ),
            routed(t100),
            Route.PINNED_CUTE_DSL,
        ),
        (
            "100 rows, pinned cute-dsl (reference)",
            "mm_mxfp8(cute-dsl), tuner",
            direct_mm(t100, "cute-dsl"),
            routed(t100),
            Route.PINNED_CUTE_DSL,
        ),
        (
            "200 rows, stock (no pin)",
            "mm_mxfp8(cute-dsl)",
            direct_mm(t200, "cute-dsl"),
            routed(t200, "cute-dsl"),
            Route.STOCK,
        ),
    ]
    timed = []
    for name, baseline, direct, route_call, route in cases:
        chosen = explain(
            N, K, {"4": 4, "20": 20, "100": 100, "200": 200}[name.split()[0]], pins=table
        )
        assert chosen.route is route, (name, chosen)
        # Each side's first call chooses its route / builds FlashInfer's runners; both must stop
        # at the same place (the CPU launch) or the ratio compares different work.
        first_direct, first_routed = _failure(direct), _failure(route_call)
        if not name.endswith("(reference)") and first_direct != first_routed:
            print(f"{name}: the direct call raised {first_direct!r}, the routed {first_routed!r}")
            return 1
        timed.append((name, baseline, _quiet(direct), _quiet(route_call)))

    print(
        f"FlashInfer {status_of('pinned_tactics').flashinfer}, host path per call (launch fails "
        f"on CPU), best of {args.rounds} alternating rounds of {args.number} calls"
    )
    print(
        f"{'route':<40}{'direct call':<32}{'direct us':>10}{'mm us':>9}{'ratio':>8}{'target':>9}  ok"
    )
    for name, baseline, direct, route_call in timed:
        best_direct = best_routed = float("inf")
        for _ in range(args.rounds):
            best_direct = min(best_direct, timeit.timeit(direct, number=args.number))
            best_routed = min(best_routed, timeit.timeit(route_call, number=args.number))
        d_us, r_us = best_direct / args.number * 1e6, best_routed / args.number * 1e6
        ratio = r_us / d_us
        reference = name.endswith("(reference)")
        target = "-" if reference else f"<={TARGET:.2f}"
        ok = "-" if reference else ("yes" if ratio <= TARGET else "NO")
        print(f"{name:<40}{baseline:<32}{d_us:>10.1f}{r_us:>9.1f}{ratio:>8.3f}{target:>9}  {ok}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
