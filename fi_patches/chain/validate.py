"""``validate``: on an sm_100/sm_103 GPU, check every pin of a table -- the pinned kernel's
numerics against a float64 reference, each wide tile launched at every row count it serves --
and time a chain with its pins against FlashInfer's own (isolated) tuning. Anywhere else every
check is reported as not run, with the reason: never a pass that did not happen.

``validate``'s report: one record per check (passed, failed, or not run with the reason),
written as markdown for people and JSON for tools.

``validate``'s chain check: the chain with its pins against the same chain on stock
``mm_mxfp8`` after FlashInfer's own tuning (in isolation, as it tunes at every start), timed
interleaved as CUDA-graph replays (sm_100/sm_103 only).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fi_patches.chain.spec import Bucket, ChainSpec
from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import SECTION as PIN_SECTION
from fi_patches.pins.table import PinTable
from fi_patches.wide.tactics import TILE_ROUNDING, WIDE_MIN_ROWS

PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"

FORMAT = "fi_patches.validate/1"


@dataclass(frozen=True)
class Check:
    """One check: ``kind`` (numerics, wide launches, chain time), what it checks, its state and
    the detail (the reason when not run)."""

    kind: str
    subject: str
    state: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "state": self.state,
            "detail": self.detail,
            **({"data": self.data} if self.data else {}),
        }


@dataclass(frozen=True)
class Report:
    device: str
    flashinfer: str
    pins: str
    chain: str | None
    checks: tuple[Check, ...]

    def count(self, state: str) -> int:
        return sum(1 for c in self.checks if c.state == state)

    @property
    def failed(self) -> bool:
        return self.count(FAILED) > 0

    def summary(self) -> str:
        return (
            f"{self.count(PASSED)} passed, {self.count(FAILED)} failed, "
            f"{self.count(NOT_RUN)} not run"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "device": self.device,
            "flashinfer": self.flashinfer,
            "pins": self.pins,
            "chain": self.chain,
            "summary": {s: self.count(s) for s in (PASSED, FAILED, NOT_RUN)},
            "checks": [c.to_json() for c in self.checks],
        }

    def to_markdown(self) -> str:
        lines = [
            "# fi_patches validate",
            "",
            f"- device: {self.device}",
            f"- FlashInfer: {self.flashinfer}",
            f"- pins: {self.pins}",
            f"- chain: {self.chain or 'none given (--chain CHAIN.toml times one)'}",
            f"- result: {self.summary()}",
            "",
        ]
        if not self.checks:
            lines.append("No checks: the pin table is empty and no chain was given.")
            return "\n".join(lines) + "\n"
        lines += ["| check | subject | state | detail |", "|---|---|---|---|"]
        lines += [
            f"| {c.kind} | {_cell(c.subject)} | {c.state} | {_cell(c.detail)} |"
            for c in self.checks
        ]
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def not_run(checks: Sequence[Check], reason: str) -> tuple[Check, ...]:
    """``checks`` all marked not run, each with ``reason``."""
    return tuple(Check(c.kind, c.subject, NOT_RUN, f"not run: {reason}") for c in checks)


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


BLACKWELL = ((10, 0), (10, 3))

Planned = tuple[Check, Callable[[], Check]]


def blackwell_reason() -> str | None:
    """None on an sm_100/sm_103 CUDA device (as torch sees it: ``FI_PATCHES_DEVICE`` does not
    count), else what is here instead."""
    try:
        import torch
    except Exception as exc:
        return f"torch is not importable ({type(exc).__name__})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    capability = tuple(torch.cuda.get_device_capability())
    if capability not in BLACKWELL:
        name = torch.cuda.get_device_name()
        return f"this device is {name} (sm_{capability[0]}{capability[1]})"
    return None


def _device_text() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
    except Exception as exc:
        return f"unknown ({type(exc).__name__})"
    return "no CUDA device"


def wide_rows(tile: int) -> range:
    """The row counts a wide tile serves (those ``pick_tile`` gives it, from 9 rows)."""
    return range(max(WIDE_MIN_ROWS, tile - TILE_ROUNDING + 1), tile + 1)


def _verdict(kind: str, subject: str, run: Callable[[], str | None], rows: list[int]) -> Check:
    try:
        problem = run()
    except Exception as exc:
        problem = f"raised {type(exc).__name__}: {exc}"
    if problem is None:
        return Check(kind, subject, PASSED, f"matches the float64 reference at rows {rows}")
    return Check(kind, subject, FAILED, problem)


def _at_rows(check: Callable[[int], str | None], rows: list[int]) -> Callable[[], str | None]:
    def run() -> str | None:
        for r in rows:
            problem = check(r)
            if problem is not None:
                return f"rows {r}: {problem}"
        return None

    return run


def _pin_checks(table: PinTable) -> list[Planned]:
    from fi_patches.chain.ops import cute_dsl_mismatch, low_latency_mismatch, wide_mismatch

    planned: list[Planned] = []
    for entry in table.entries("low_latency"):
        subject = f"[[low_latency]] #{entry.index} {entry.n}x{entry.k} rows {entry.rows_text}"
        rows = sorted({entry.min_rows, entry.max_rows})

        def ll(r: int, e: Any = entry) -> str | None:
            return low_latency_mismatch(e.n, e.k, r, e.tactic)

        planned.append(_planned("numerics", subject, _at_rows(ll, rows), rows))
    for entry in table.entries("cute_dsl"):
        subject = f"[[cute_dsl]] #{entry.index} {entry.n}x{entry.k} rows {entry.rows_text}"
        rows = sorted({entry.min_rows, entry.max_rows})

        def cute(r: int, e: Any = entry) -> str | None:
            return cute_dsl_mismatch(e.n, e.k, r, e.tactic)

        planned.append(_planned("numerics", subject, _at_rows(cute, rows), rows))
    for entry in table.entries("wide"):
        subject = f"[[wide]] #{entry.index} {entry.n}x{entry.k} tile {entry.tile}"

        def wide(r: int, e: Any = entry) -> str | None:
            return wide_mismatch(e.n, e.k, r, tile=e.tile, tactic=e.tactic)

        planned.append(_planned("numerics", subject, _at_rows(wide, [entry.tile]), [entry.tile]))
        every = list(wide_rows(entry.tile))
        planned.append(_planned("wide launches", subject, _at_rows(wide, every), every))
    return planned


def _tuner_pin_checks(table: PinTable) -> list[Check]:
    """Each ``[[pin]]`` entry as a check ``validate`` does not run: it names a tuner key of any
    op, not a kernel ``validate`` can launch against a reference, so a table of them is never
    reported as validated."""
    reason = (
        "not run: validate launches the MXFP8 sections' kernels; a [[pin]] names a tuner key "
        "(pins check lists its runner's tactics, the tuner checks its pin)"
    )
    return [
        Check("numerics", f"[[pin]] #{e.index} {e.op} {e.runner}", NOT_RUN, reason)
        for e in table.entries(PIN_SECTION)
    ]


def _planned(kind: str, subject: str, run: Callable[[], str | None], rows: list[int]) -> Planned:
    return Check(kind, subject, NOT_RUN, ""), lambda: _verdict(kind, subject, run, rows)


def _chain_checks(spec: ChainSpec | None, table: PinTable) -> list[Planned]:
    """The chain's time per bucket, where a chain is given (none is asked for otherwise)."""
    if spec is None:
        return []
    return [_chain_planned(spec, table, bucket) for bucket in spec.buckets]


def _chain_planned(spec: ChainSpec, table: PinTable, bucket: Any) -> Planned:
    def run() -> Check:
        return chain_time(spec, table, bucket)

    return Check("chain time", f"{spec.name} rows {bucket.label}", NOT_RUN, ""), run


def validate(table: PinTable, spec: ChainSpec | None = None) -> Report:
    """Every check for ``table`` (and ``spec``'s chain); run only on sm_100/sm_103."""
    from fi_patches.compat.features import installed_flashinfer

    planned = _pin_checks(table) + _chain_checks(spec, table)
    listed = tuple(_tuner_pin_checks(table))
    version = installed_flashinfer().version_text or "not installed"
    chain = spec.source if spec is not None else None
    reason = blackwell_reason()
    if reason is not None:
        checks = not_run([c for c, _ in planned], f"needs sm_100/sm_103 ({reason})")
        return Report(_device_text(), version, table.source, chain, checks + listed)
    ran = tuple(run() for _, run in planned)
    return Report(_device_text(), version, table.source, chain, ran + listed)
