"""Host cost of ``fi_patches.mxfp8.mm``'s routing per call against calling ``mm_mxfp8``
directly, as ratios measured in the same run (target <= 1.05x on the host path).

On CPU this runs FlashInfer's real ``mm_mxfp8`` host path under the tests' simulation of an
sm_103 device (``tests/simulation.py``); both sides stop where the kernel launch fails, so what
is timed is Python bookkeeping plus FlashInfer's own host work, which is what routing must not
show up next to. Run from the repository root:
    python benchmarks/dispatch_overhead.py [--rounds 15] [--number 300]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("FI_PATCHES_DEVICE", "sm_103")

TARGET = 1.05


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
    from fi_patches.mxfp8 import explain, mm
    from fi_patches.pins import PinTable
    from tests.mxfp8_inputs import Mxfp8Problem

    refresh()
    record = status_of("pinned_tactics")
    if not record.enabled:
        print(f"pinned_tactics is disabled here: {record.reason}")
        return 0
    n, k = 7168, 1536
    empty = PinTable.empty()
    cases = []
    for rows, backend in ((4, "cutedsl_low_latency"), (200, "cute-dsl")):
        t = Mxfp8Problem(n, k, rows).tensors()
        out = torch.empty(rows, n, dtype=torch.bfloat16)

        def direct(t=t, out=out, backend=backend):
            with contextlib.suppress(AssertionError):  # the launch, on CPU
                flashinfer.mm_mxfp8(
                    t["a"], t["b"], t["a_scale"], t["b_scale"], out=out, backend=backend
                )

        def routed(t=t, out=out, backend=backend):
            with contextlib.suppress(AssertionError):
                mm(
                    t["a"],
                    t["b"],
                    t["b_scale"],
                    x_scale=t["a_scale"],
                    pins=empty,
                    out=out,
                    stock_backend=backend,
                )

        direct()
        routed()  # first calls choose the route and build FlashInfer's runners
        route = explain(n, k, rows, pins=empty).route.value
        cases.append((f"{rows} rows -> {route}", direct, routed))

    print(
        f"FlashInfer {record.flashinfer}, host path per call (launch fails on CPU), "
        f"best of {args.rounds} alternating rounds of {args.number} calls"
    )
    print(
        f"{'case':<36}{'mm_mxfp8 us':>13}{'fi_patches.mxfp8.mm us':>24}{'ratio':>8}{'target':>9}  ok"
    )
    for name, direct, routed in cases:
        best_direct = best_routed = float("inf")
        for _ in range(args.rounds):
            best_direct = min(
                best_direct, timeit.timeit(direct, number=args.number) / args.number * 1e6
            )
            best_routed = min(
                best_routed, timeit.timeit(routed, number=args.number) / args.number * 1e6
            )
        ratio = best_routed / best_direct
        print(
            f"{name:<36}{best_direct:>13.1f}{best_routed:>24.1f}{ratio:>8.3f}{'<=' + format(TARGET, '.2f'):>9}  "
            f"{'yes' if ratio <= TARGET else 'NO'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
