"""``validate``'s chain check: the chain with its pins against the same chain on stock
``mm_mxfp8`` after FlashInfer's own tuning (in isolation, as it tunes at every start), timed
interleaved as CUDA-graph replays (sm_100/sm_103 only)."""

from __future__ import annotations

import statistics
from typing import Any

from fi_patches.chain.report import FAILED, NOT_RUN, PASSED, Check
from fi_patches.chain.spec import Bucket, ChainSpec
from fi_patches.internals import flashinfer as fi
from fi_patches.pins.table import PinTable

STOCK_BACKEND = {"low_latency": "cutedsl_low_latency", "cute_dsl": "cute-dsl", "wide": "cute-dsl"}
"""What stock FlashInfer runs where a pin would: ``mm_mxfp8`` on the low-latency backend up to
8 rows, on cute-dsl above (FlashInfer has no wide tile)."""


class StockOp:
    """``op``'s GEMM through stock ``mm_mxfp8``, on the same inputs (its tactic: the tuner's)."""

    def __init__(self, op: Any) -> None:
        self.op = op
        self.name = op.name
        self.backend = STOCK_BACKEND[op.section]

    def tactics(self, rows: int) -> list[Any]:
        return [None]

    def inputs(self, rows: int) -> Any:
        return self.op.inputs(rows)

    def launch(self, inputs: Any, tactic: Any) -> None:
        a, b, a_scale, b_scale, out_dtype, out, _ = inputs
        fi.mm_mxfp8()(a, b, a_scale, b_scale, out=out, out_dtype=out_dtype, backend=self.backend)


def chain_time(spec: ChainSpec, table: PinTable, bucket: Bucket) -> Check:
    """Time ``spec``'s chain at ``bucket``: pinned (``table``) against stock-tuned."""
    import torch

    from fi_patches.chain.plan import build_plan
    from fi_patches.chain.select import measure
    from fi_patches.chain.timing import CudaGraphTimer, Trial
    from fi_patches.pinning import stack

    subject = f"{spec.name} rows {bucket.label}"
    major, minor = torch.cuda.get_device_capability()
    try:
        one = ChainSpec(spec.name, spec.ops, (bucket,), spec.settings, spec.source)
        [(_, slots)] = build_plan(one, sm_version=major * 10 + minor, current=table)
        missing = [s.name for s in slots if s.pin is None]
        if missing:
            return Check(
                "chain time",
                subject,
                NOT_RUN,
                f"not run: no pin covers {', '.join(missing)} at rows {bucket.label}",
            )
        names = tuple(s.name for s in slots)
        stock = tuple(StockOp(s.op) for s in slots)
        settings = spec.settings
        with stack.isolated():  # stock means no pins, whatever this process has active
            inputs = [s.op.inputs(bucket.rows) for s in slots]
            with fi.autotune()(True):
                for op, args in zip(stock, inputs, strict=True):
                    op.launch(args, None)
            torch.cuda.synchronize()
            timer = CudaGraphTimer(
                replays=settings.replays, warmup=settings.warmup, cold_l2=settings.cold_l2
            )
            pinned = Trial(
                bucket.rows, names, tuple(s.pin for s in slots), tuple(s.op for s in slots)
            )
            tuned = Trial(bucket.rows, names, (None,) * len(slots), stock)
            samples = measure([pinned, tuned], timer, settings.repeats)
    except Exception as exc:
        return Check("chain time", subject, FAILED, f"raised {type(exc).__name__}: {exc}")
    pinned_us, stock_us = (statistics.median(s) for s in samples)
    ratio = pinned_us / stock_us if stock_us > 0 else float("inf")
    data = {
        "pinned_us": round(pinned_us, 3),
        "stock_us": round(stock_us, 3),
        "ratio": round(ratio, 4),
        "samples": len(samples[0]),
    }
    detail = f"pinned {pinned_us:.2f} us vs stock-tuned {stock_us:.2f} us ({ratio:.3f}x)"
    if ratio <= 1.0 + settings.tie_tolerance:
        return Check("chain time", subject, PASSED, detail, data)
    return Check("chain time", subject, FAILED, detail + ": the pinned chain is slower", data)
