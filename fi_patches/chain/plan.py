"""From a CHAIN.toml to what the selection tunes: per bucket, one slot per op on the runner that
serves those rows, sharing a coordinate with every op of the same runner and weight shape
(they share a pin), each with its current pin."""

from __future__ import annotations

from collections.abc import Callable

from fi_patches.chain.errors import ChainError, ChainSpecError, UpstreamError
from fi_patches.chain.mxfp8_ops import Mxfp8Op, mxfp8_op
from fi_patches.chain.routes import section_for
from fi_patches.chain.select import Slot
from fi_patches.chain.spec import Bucket, ChainSpec
from fi_patches.pins.errors import PinProblem
from fi_patches.pins.table import PinTable

Plan = list[tuple[Bucket, list[Slot]]]

TUNER_BUCKETED = ("low_latency", "cute_dsl")
"""Sections whose pins FlashInfer's tuner caches per row bucket (wide pins are per tile)."""


def coordinate(section: str, n: int, k: int) -> str:
    return f"{section} {n}x{k}"


def check_tuner_buckets(spec: ChainSpec, bucket_of: Callable[[int], int]) -> None:
    """Raise :class:`ChainSpecError` for a bucket that cuts through one of the tuner's row
    buckets on a tuner-bucketed runner: its pin could not be honoured (``pins check`` refuses
    it too)."""
    from fi_patches.pinning.validate import split_bucket
    from fi_patches.pins.keys import bucket_groups

    groups = bucket_groups(bucket_of, 2 * max(b.max_rows for b in spec.buckets) + 2)
    problems = []
    for bucket in spec.buckets:
        sections = {section_for(op.runner, bucket.rows) for op in spec.ops}
        if not sections & set(TUNER_BUCKETED):
            continue
        split = split_bucket(bucket.min_rows, bucket.max_rows, groups)
        if split is not None:
            field, lo, hi = split
            problems.append(
                PinProblem(
                    spec.source,
                    f"[[bucket]] #{bucket.index}",
                    field,
                    getattr(bucket, field),
                    f"rows {bucket.label} split FlashInfer's tuner bucket of rows "
                    f"{lo}..{hi}, which caches one tactic for all of them",
                )
            )
    if problems:
        raise ChainSpecError(problems)


def _adapter(name: str, section: str, n: int, k: int, sm_version: int) -> Mxfp8Op:
    try:
        return mxfp8_op(name, section, n, k, sm_version)
    except ChainError:
        raise
    except Exception as exc:
        raise UpstreamError(
            f"FlashInfer's {section} runner is not available here ({type(exc).__name__}: {exc})"
        ) from exc


def build_plan(spec: ChainSpec, *, sm_version: int, current: PinTable | None = None) -> Plan:
    """Slots per bucket for ``spec`` on an ``sm_version`` device; ties prefer ``current``."""
    ops: dict[tuple[str, str], Mxfp8Op] = {}
    plan: Plan = []
    for bucket in spec.buckets:
        slots = []
        for op_spec in spec.ops:
            section = section_for(op_spec.runner, bucket.rows)
            assert section is not None  # the spec checked every route
            key = (op_spec.name, section)
            if key not in ops:
                ops[key] = _adapter(op_spec.name, section, op_spec.n, op_spec.k, sm_version)
            op = ops[key]
            slots.append(
                Slot(
                    op_spec.name,
                    coordinate(section, op_spec.n, op_spec.k),
                    op,
                    op.pin_of(current, bucket),
                )
            )
        plan.append((bucket, slots))
    return plan
