"""``pins diff``: what several tuner caches or pin tables choose per tuner bucket, and where
they differ. A pin table's row range counts once per FlashInfer bucket it covers; a ``[[wide]]``
entry (and a wide runner's cache entry) is keyed by its activation tile."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fi_patches.pins.merge import nested_tuple, tactic_text
from fi_patches.pins.record import SECTION_OF_RUNNER, TunedEntry, bucket_rows, read_cache
from fi_patches.pins.schema import LOW_LATENCY_MAX_ROWS
from fi_patches.pins.table import PinTable

BucketKey = tuple[str, int, int, int]
"""``(section, n, k, bucket)``; for ``wide`` the last field is the tile."""

Choices = dict[BucketKey, Any]


def from_entries(entries: Iterable[TunedEntry]) -> Choices:
    """The tactic per bucket of tuner-cache entries (as ``pins record`` would pin them)."""
    found: Choices = {}
    for e in entries:
        section = SECTION_OF_RUNNER[e.runner]
        tactic = nested_tuple(e.tactic)
        if section == "wide":
            found[(section, e.n, e.k, int(tactic[0]))] = tactic[1:]
        elif section != "low_latency" or e.bucket <= LOW_LATENCY_MAX_ROWS:
            found[(section, e.n, e.k, e.bucket)] = tactic
    return found


def from_table(table: PinTable, bucket_of: Callable[[int], int]) -> Choices:
    """The tactic per bucket of a pin table."""
    found: Choices = {}
    for section in ("low_latency", "cute_dsl"):
        for entry in table.entries(section):
            buckets = {bucket_of(rows) for rows in range(entry.min_rows, entry.max_rows + 1)}
            for bucket in sorted(buckets):
                found[(section, entry.n, entry.k, bucket)] = nested_tuple(entry.tactic)
    for entry in table.entries("wide"):
        found[("wide", entry.n, entry.k, entry.tile)] = nested_tuple(entry.tactic)
    return found


def read_choices(path: str, bucket_of: Callable[[int], int]) -> Choices:
    """The choices of a tuner cache (v1 file, v2 store directory) or a pin table (``.toml``,
    or ``.json`` with a ``meta`` table); raises ``TunerCacheError`` or ``PinTableError``."""
    location = Path(path)
    if location.suffix.lower() == ".toml":
        return from_table(PinTable.from_file(location), bucket_of)
    if location.suffix.lower() == ".json" and location.is_file():
        try:
            data = json.loads(location.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            data = None  # read_cache names the problem
        if isinstance(data, dict) and "meta" in data:
            return from_table(PinTable.from_mapping(data, source=str(location)), bucket_of)
    entries, _ = read_cache(location)
    return from_entries(entries)


@dataclass(frozen=True)
class BucketDiff:
    key: BucketKey
    values: tuple[Any, ...]
    """Each input's tactic, None where the input has no entry for the bucket."""


def differing(choices: Sequence[Choices]) -> tuple[list[BucketDiff], int]:
    """The buckets whose tactic is not the same in every input (an input without the bucket
    differs too), and the number of buckets in any input."""
    keys = sorted({key for found in choices for key in found})
    diffs = []
    for key in keys:
        values = tuple(found.get(key) for found in choices)
        if len(set(values)) > 1:
            diffs.append(BucketDiff(key, values))
    return diffs, len(keys)


def bucket_label(key: BucketKey, bucket_of: Callable[[int], int]) -> str:
    """``low_latency 7168x1536 rows 5..8`` or ``wide 7168x1536 tile 16``."""
    section, n, k, bucket = key
    if section == "wide":
        return f"wide {n}x{k} tile {bucket}"
    lo, hi = bucket_rows(bucket_of, bucket)
    rows = str(lo) if lo == hi else f"{lo}..{hi}"
    return f"{section} {n}x{k} rows {rows}"


def value_text(value: Any) -> str:
    return "-" if value is None else tactic_text(value)
