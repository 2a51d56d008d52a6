"""A tuning run's results as a pin table (one section per runner, adjacent buckets with the
same tactic merged) and its provenance as a JSON sidecar next to the table.

The pin table's ``[meta]`` holds only ``note`` and ``source`` besides device and release, so
``note`` gets the one-line summary and names the sidecar, ``<table stem>.provenance.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fi_patches.chain.errors import TuneError
from fi_patches.chain.mxfp8_ops import Mxfp8Op
from fi_patches.chain.plan import Plan
from fi_patches.chain.provenance import BucketResult, settings_json, summary
from fi_patches.chain.spec import ChainSpec
from fi_patches.pins.table import PinTable
from fi_patches.tools.record import dumps

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
