"""From a CHAIN.toml to what the selection tunes: per bucket, one slot per op on the runner that
serves those rows, sharing a coordinate with every op of the same runner and weight shape
(they share a pin), each with its current pin.

A tuning run's results as a pin table (one section per runner, adjacent buckets with the
same tactic merged) and its provenance as a JSON sidecar next to the table.

The pin table's ``[meta]`` holds only ``note`` and ``source`` besides device and release, so
``note`` gets the one-line summary and names the sidecar, ``<table stem>.provenance.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fi_patches.chain.ops import Mxfp8Op, mxfp8_op
from fi_patches.chain.select import BucketResult, Slot, settings_json, summary
from fi_patches.chain.spec import (
    Bucket,
    ChainError,
    ChainSpec,
    ChainSpecError,
    TuneError,
    UpstreamError,
    section_for,
)
from fi_patches.pins.reading import PinProblem
from fi_patches.pins.table import PinTable
from fi_patches.tools.record import dumps

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


PROVENANCE_FORMAT = "fi_patches.chain.provenance/1"


def sidecar_path(table_path: str | Path) -> Path:
    """Where the provenance of the table at ``table_path`` goes: ``pins.toml`` ->
    ``pins.provenance.json`` in the same directory."""
    path = Path(table_path)
    return path.with_name(f"{path.stem}.provenance.json")


def _entries(plan: Plan, results: Sequence[BucketResult]) -> dict[str, list[dict[str, Any]]]:
    ranges: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    wide: list[dict[str, Any]] = []
    for (bucket, slots), result in zip(plan, results, strict=True):
        done = set()
        for slot in slots:
            if slot.coordinate in done:
                continue
            done.add(slot.coordinate)
            op = slot.op
            if not isinstance(op, Mxfp8Op):
                raise TuneError(f"op {slot.name!r} ({op!r}) has no pin-table section")
            entry = op.pin_entry(bucket, result.chosen[slot.coordinate])
            if op.section == "wide":
                wide.append(entry)
                continue
            group = ranges.setdefault((op.section, op.n, op.k), [])
            previous = group[-1] if group else None
            if (
                previous is not None
                and previous["tactic"] == entry["tactic"]
                and previous["max_rows"] + 1 == entry["min_rows"]
            ):
                previous["max_rows"] = entry["max_rows"]
            else:
                group.append(entry)
    sections: dict[str, list[dict[str, Any]]] = {}
    for (section, _, _), group in ranges.items():
        sections.setdefault(section, []).extend(group)
    if wide:
        sections["wide"] = wide
    return sections


def pin_table(
    plan: Plan,
    results: Sequence[BucketResult],
    *,
    device: str,
    flashinfer: str,
    source: str,
    note: str,
    path: str,
) -> PinTable:
    """The validated pin table of ``results`` (chosen on ``device`` with FlashInfer
    ``flashinfer``, a version such as ``0.7.4``), to be written to ``path``: what its messages
    name it by (``source``, the command that chose it, goes in ``[meta]``)."""
    meta = {"device": device, "flashinfer": f"=={flashinfer}", "note": note, "source": source}
    return PinTable.from_mapping({"meta": meta, **_entries(plan, results)}, source=path)


def provenance(
    spec: ChainSpec,
    results: Sequence[BucketResult],
    *,
    device: str,
    flashinfer: str,
    timer: str,
    command: str,
) -> dict[str, Any]:
    """The full record of a run, as the sidecar holds it."""
    return {
        "format": PROVENANCE_FORMAT,
        "command": command,
        "chain": {
            "name": spec.name,
            "file": spec.source,
            "ops": [{"name": o.name, "n": o.n, "k": o.k, "runner": o.runner} for o in spec.ops],
        },
        "mode": results[0].mode if results else "chain",
        "device": device,
        "flashinfer": flashinfer,
        "timer": timer,
        "settings": settings_json(spec.settings),
        "buckets": [r.to_json() for r in results],
    }


def note(spec: ChainSpec, results: Sequence[BucketResult], sidecar: str | None) -> str:
    ops = [f"{o.name} {o.n}x{o.k}" for o in spec.ops]
    return summary(spec.name, ops, results, spec.settings, sidecar)


def files(table: PinTable, path: str | Path, record: dict[str, Any]) -> list[tuple[Path, str]]:
    """The table (``.toml`` or ``.json`` by suffix) and its provenance sidecar, as ``(path,
    text)`` pairs for :func:`fi_patches._atomic.write_all`, the table first."""
    out = Path(path)
    mapping = table.to_mapping()
    text = json.dumps(mapping, indent=2) + "\n" if out.suffix == ".json" else dumps(mapping)
    return [(out, text), (sidecar_path(out), json.dumps(record, indent=1) + "\n")]
