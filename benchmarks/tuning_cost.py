"""Tactics FlashInfer's tuner profiles per row bucket: stock, under ``pinned_tactics()``
(narrow) and with ``mode="preseed"`` (target 0), for DeepSeek-like shapes and 1..64 rows,
counted in the same run on CPU (profiling calls counted by the tests' simulation of an sm_103
device, ``tests/simulation.py``; each shape's pins are recorded from its own stock tuning run).
Run from the repository root:
    python benchmarks/tuning_cost.py
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("FI_PATCHES_DEVICE", "sm_103")
os.environ["FI_PATCHES_CACHE_DIR"] = "off"  # the simulation changes torch.cuda under its key

SHAPES = ((7168, 1536), (1536, 7168), (24576, 1536))
RUNS = (("cutedsl_low_latency", 8), ("cute-dsl", 64))  # backend, rows tuned


def main() -> int:
    import pytest
    import torch

    from tests import simulation

    spy = simulation.install(pytest.MonkeyPatch())  # SIMULATION: device-only helpers on CPU
    import flashinfer
    from flashinfer.autotuner import AutoTuner

    import fi_patches
    from fi_patches.compat import refresh, status_of
    from fi_patches.pinning.validate import mxfp8_bucket_of
    from fi_patches.tools.record import from_tuner, to_table
    from tests.mxfp8_inputs import Mxfp8Problem

    refresh()
    for feature in ("pinned_tactics", "pinned_cute_dsl"):
        record = status_of(feature)
        if not record.enabled:
            print(f"{feature} is disabled here: {record.reason}")
            return 0
    bucket_of = mxfp8_bucket_of()
    tuner = AutoTuner.get()

    def tune(n: int, k: int) -> Counter:
        spy.clear()
        for backend, rows in RUNS:
            with flashinfer.autotune(True), contextlib.suppress(AssertionError):  # CPU launch
                flashinfer.mm_mxfp8(
                    *Mxfp8Problem(n, k, rows).mm_args(), out_dtype=torch.bfloat16, backend=backend
                )
        return Counter((p.runner, bucket_of(p.rows)) for p in spy.profiled)

    print(f"FlashInfer {status_of('pinned_tactics').flashinfer}: tactics profiled per bucket")
    header = f"{'weight NxK':<12}{'runner':<40}{'bucket':>7}{'stock':>7}{'narrow':>8}{'preseed':>9}"
    print(header)
    print("-" * len(header))
    totals: Counter[str] = Counter()
    for n, k in SHAPES:
        tuner.clear_cache()
        stock = tune(n, k)
        table = to_table(
            from_tuner(tuner),
            device="sm_103",
            flashinfer_version=flashinfer.__version__,
            source=f"stock tuning of {n}x{k}",
            bucket_of=bucket_of,
        )
        tuner.clear_cache()
        with fi_patches.pinned_tactics(table):
            narrow = tune(n, k)
        tuner.clear_cache()
        with fi_patches.pinned_tactics(table, mode="preseed"):
            preseed = tune(n, k)
        for runner, bucket in sorted(stock):
            row = (stock[runner, bucket], narrow[runner, bucket], preseed[runner, bucket])
            totals.update({"stock": row[0], "narrow": row[1], "preseed": row[2]})
            print(f"{f'{n}x{k}':<12}{runner:<40}{bucket:>7}{row[0]:>7}{row[1]:>8}{row[2]:>9}")
    print("-" * len(header))
    print(f"{'total':<59}{totals['stock']:>7}{totals['narrow']:>8}{totals['preseed']:>9}")
    ratio = totals["narrow"] / totals["stock"] if totals["stock"] else 0.0
    print(f"narrow profiles {ratio:.3f}x of stock; preseed profiles {totals['preseed']} (target 0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
