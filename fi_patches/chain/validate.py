"""``validate``: on an sm_100/sm_103 GPU, check every pin of a table -- the pinned kernel's
numerics against a float64 reference, each wide tile launched at every row count it serves --
and time a chain with its pins against FlashInfer's own (isolated) tuning. Anywhere else every
check is reported as not run, with the reason: never a pass that did not happen."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fi_patches.chain.report import FAILED, NOT_RUN, PASSED, Check, Report, not_run
from fi_patches.chain.spec import ChainSpec
from fi_patches.pins.table import PinTable
from fi_patches.pins.tuner_pin import SECTION as PIN_SECTION
from fi_patches.wide.tactics import TILE_ROUNDING, WIDE_MIN_ROWS

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
    from fi_patches.chain import numerics

    planned: list[Planned] = []
    for entry in table.entries("low_latency"):
        subject = f"[[low_latency]] #{entry.index} {entry.n}x{entry.k} rows {entry.rows_text}"
        rows = sorted({entry.min_rows, entry.max_rows})

        def ll(r: int, e: Any = entry) -> str | None:
            return numerics.low_latency_mismatch(e.n, e.k, r, e.tactic)

        planned.append(_planned("numerics", subject, _at_rows(ll, rows), rows))
    for entry in table.entries("cute_dsl"):
        subject = f"[[cute_dsl]] #{entry.index} {entry.n}x{entry.k} rows {entry.rows_text}"
        rows = sorted({entry.min_rows, entry.max_rows})

        def cute(r: int, e: Any = entry) -> str | None:
            return numerics.cute_dsl_mismatch(e.n, e.k, r, e.tactic)

        planned.append(_planned("numerics", subject, _at_rows(cute, rows), rows))
    for entry in table.entries("wide"):
        subject = f"[[wide]] #{entry.index} {entry.n}x{entry.k} tile {entry.tile}"

        def wide(r: int, e: Any = entry) -> str | None:
            return numerics.wide_mismatch(e.n, e.k, r, tile=e.tile, tactic=e.tactic)

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
        from fi_patches.chain.chain_check import chain_time

        return chain_time(spec, table, bucket)

    return Check("chain time", f"{spec.name} rows {bucket.label}", NOT_RUN, ""), run


def validate(table: PinTable, spec: ChainSpec | None = None) -> Report:
    """Every check for ``table`` (and ``spec``'s chain); run only on sm_100/sm_103."""
    from fi_patches.compat.evaluate import installed_flashinfer

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
