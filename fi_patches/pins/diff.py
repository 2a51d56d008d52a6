"""``pins diff``: what several tuner caches or pin tables choose per bucket, for every op, and
where they differ. A section entry's row range counts once per FlashInfer bucket it covers
(a ``[[wide]]`` entry, and a wide runner's cache entry, by its activation tile); a ``[[pin]]``
entry covers the op's buckets its shapes and row range match, and, compared with other tables,
its range's ends and the powers of two between them. Outside the sections a bucket is the op
and profile, and what is compared there is the runner and its tactic, as FlashInfer's tuner
keeps one winning runner per bucket: caches whose winners are different runners differ on the
same bucket. Runners tuned apart (one input holds winners of both for one bucket: the op called
with a ``backend`` argument) are compared each on its own, as ``pins record`` merges them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fi_patches._limits import LOW_LATENCY_MAX_ROWS
from fi_patches.pins.keys import Profile, TunerKey, as_tactic, bucket_rows, tactic_text
from fi_patches.pins.record import (
    Apart,
    Tuned,
    read_cache,
    runners_apart,
    section_of,
)
from fi_patches.pins.table import PinTable
from fi_patches.pins.tuner_pin import SECTION as PIN
from fi_patches.pins.tuner_pin import TunerPin, runner_overlaps

BucketKey = tuple[Any, ...]
"""``(section, n, k, bucket)`` (for ``wide`` the last field is the tile), or
``("pin", op, profile, runner)``: an input's own winner, or, compared, the lane it decides
(the runner where it is tuned apart, else ``""``)."""


@dataclass(frozen=True)
class Won:
    """A ``[[pin]]`` bucket's winner: the runner and its tactic."""

    runner: str
    tactic: Any

    def text(self) -> str:
        return f"{self.runner} {tactic_text(self.tactic)}"


@dataclass
class Choices:
    """One input's tactic per key, and the ``[[pin]]`` entries that cover keys by pattern."""

    found: dict[BucketKey, Any] = field(default_factory=dict)
    pins: list[TunerPin] = field(default_factory=list)

    def placements(self) -> list[tuple[str, Profile, str]]:
        """``(op, profile, runner)`` of each ``[[pin]]`` winner of a cache."""
        return [(k[1], k[2], k[3]) for k in self.found if k[0] == PIN]

    def lanes(self, apart: Apart) -> dict[BucketKey, Any]:
        """``found`` with each ``[[pin]]`` winner under the lane it decides."""
        return {_lane(k, apart): v for k, v in self.found.items()}

    def covering(self, key: BucketKey, apart: Apart) -> Any:
        """What this input's ``[[pin]]`` entries pin for the lane ``key``, or None."""
        _, op, profile, lane = key
        for pin in self.pins:
            mine = pin.runner in apart.get(op, ())
            if (pin.runner == lane if lane else not mine) and _covers(pin, op, profile):
                return Won(pin.runner, pin.tactic)
        return None


def _lane(key: BucketKey, apart: Apart) -> BucketKey:
    """A ``[[pin]]`` key under its lane: its runner where tuned apart, else ``""``."""
    if key[0] != PIN:
        return key
    _, op, profile, runner = key
    return PIN, op, profile, runner if runner in apart.get(op, ()) else ""


def _covers(pin: TunerPin, op: str, profile: Profile) -> bool:
    """Whether ``pin`` pins the bucket ``profile`` of ``op``."""
    if pin.op != op or pin.shapes.masked(profile) != pin.shapes.fixed():
        return False
    rows = pin.shapes.rows_of(profile)
    return rows is not None and pin.covers(rows)


def from_entries(entries: Iterable[Tuned], bucket_of: Callable[[int], int] | None) -> Choices:
    """The tactic per key of tuner-cache entries (as ``pins record`` would pin them)."""
    found = Choices()
    for e in entries:
        section = section_of(e.key) if bucket_of is not None else None
        tactic = as_tactic(e.tactic)
        if section is None:
            found.found[(PIN, e.key.op, e.key.profile, e.key.runner)] = Won(e.key.runner, tactic)
        elif section.section == "wide":
            found.found[("wide", section.n, section.k, int(tactic[0]))] = tactic[1:]
        elif section.section != "low_latency" or section.bucket <= LOW_LATENCY_MAX_ROWS:
            found.found[(section.section, section.n, section.k, section.bucket)] = tactic
    return found


def pin_keys(pin: TunerPin) -> list[TunerKey]:
    """Concrete keys standing for a ``[[pin]]`` entry where no cache names them."""
    if not pin.shapes.has_rows:
        values = [0]
    else:
        values = sorted(
            {pin.min_rows, pin.max_rows}
            | {1 << i for i in range(pin.max_rows.bit_length()) if pin.min_rows <= 1 << i}
        )
        values = [v for v in values if pin.min_rows <= v <= pin.max_rows]
    keys = []
    for value in values:
        profile = tuple(
            tuple(value if d == "rows" else (-1 if d == "*" else int(d)) for d in shape)
            for shape in pin.shapes.dims
        )
        keys.append(TunerKey(pin.op, pin.runner, profile, pin.extras or "*"))
    return keys


def _pin_buckets(pin: TunerPin) -> list[BucketKey]:
    """:func:`pin_keys` as the buckets a diff compares."""
    return [(PIN, key.op, key.profile, key.runner) for key in pin_keys(pin)]


class NeedsBuckets(ValueError):
    """A table's row ranges must be split into FlashInfer's tuner buckets, and no bucket map is
    at hand (FlashInfer is not installed); the message names the file and the sections."""


def from_table(table: PinTable, bucket_of: Callable[[int], int] | None) -> Choices:
    """The tactic per key of a pin table; raises :class:`NeedsBuckets` for a table with
    ``[[low_latency]]`` or ``[[cute_dsl]]`` entries when ``bucket_of`` is None."""
    found = Choices(pins=list(table.entries(PIN)))
    bucketed = [s for s in ("low_latency", "cute_dsl") if table.entries(s)]
    if bucketed and bucket_of is None:
        raise NeedsBuckets(
            f"{table.source}: comparing its {' and '.join(f'[[{s}]]' for s in bucketed)} "
            "entries needs FlashInfer's tuner buckets"
        )
    if bucket_of is not None:
        for section in bucketed:
            for entry in table.entries(section):
                buckets = {bucket_of(rows) for rows in range(entry.min_rows, entry.max_rows + 1)}
                for bucket in sorted(buckets):
                    found.found[(section, entry.n, entry.k, bucket)] = as_tactic(entry.tactic)
    for entry in table.entries("wide"):
        found.found[("wide", entry.n, entry.k, entry.tile)] = as_tactic(entry.tactic)
    return found


def read_choices(path: str, bucket_of: Callable[[int], int] | None) -> Choices:
    """The choices of a tuner cache (v1 file, v2 store directory) or a pin table (``.toml``,
    or ``.json`` with a ``meta`` table); raises ``TunerCacheError`` or ``PinTableError``."""
    location = Path(path)
    if location.suffix.lower() == ".toml":
        return from_table(PinTable.from_file(location), bucket_of)
    if location.suffix.lower() == ".json" and location.is_file():
        try:
            data = json.loads(location.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            data = None  # read_cache names the problem
        if isinstance(data, dict) and "meta" in data:
            return from_table(PinTable.from_mapping(data, source=str(location)), bucket_of)
    entries, _ = read_cache(location)
    return from_entries(entries, bucket_of)


@dataclass(frozen=True)
class BucketDiff:
    key: BucketKey
    values: tuple[Any, ...]
    """Each input's tactic, None where the input has no entry for the key."""


def differing(choices: Sequence[Choices]) -> tuple[list[BucketDiff], int]:
    """The keys whose tactic (and runner) is not the same in every input (an input without the
    key differs too), and the number of keys in any input. Runners tuned apart in any input
    (:func:`~fi_patches.pins.record.runners_apart`; in a table, two runners pinning one bucket)
    are compared each on its own; other runners of an op are one lane per bucket."""
    apart = runners_apart(found.placements() for found in choices)
    for found in choices:
        for first, second in runner_overlaps(found.pins):
            apart.setdefault(first.op, set()).update((first.runner, second.runner))
    own = [found.lanes(apart) for found in choices]
    keys = {key for found in own for key in found}
    if not any(k[0] == PIN for k in keys):
        keys |= {
            _lane(k, apart) for found in choices for pin in found.pins for k in _pin_buckets(pin)
        }
    ordered = sorted(keys, key=_natural)
    diffs = []
    for key in ordered:
        values = tuple(
            mine[key] if key in mine else found.covering(key, apart) if key[0] == PIN else None
            for found, mine in zip(choices, own, strict=True)
        )
        if len({repr(v) for v in values}) > 1:
            diffs.append(BucketDiff(key, values))
    return diffs, len(ordered)


def _natural(value: Any) -> tuple[Any, ...]:
    """A sort key that orders numbers by value, not by their text (rows 2 before rows 9..16),
    whatever mix of sections, names and profiles the keys hold."""
    if isinstance(value, bool) or not isinstance(value, (int, str, tuple)):
        return (3, repr(value))
    if isinstance(value, int):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    return (2, tuple(_natural(part) for part in value))


def bucket_label(key: BucketKey, bucket_of: Callable[[int], int] | None) -> str:
    """``low_latency 7168x1536 rows 5..8``, ``wide 7168x1536 tile 16``, or a ``[[pin]]``
    bucket as ``op profile`` (then its runner, where it is tuned apart)."""
    if key[0] == PIN:
        _, op, profile, lane = key
        return f"{op} {list(map(list, profile))}" + (f" {lane}" if lane else "")
    section, n, k, bucket = key
    if section == "wide":
        return f"wide {n}x{k} tile {bucket}"
    lo, hi = bucket_rows(bucket_of, bucket) if bucket_of is not None else (bucket, bucket)
    rows = str(lo) if lo == hi else f"{lo}..{hi}"
    return f"{section} {n}x{k} rows {rows}"


def cell_text(value: Any) -> str:
    """A cell of the diff: ``-`` for no entry, ``runner tactic`` for a ``[[pin]]`` bucket."""
    if isinstance(value, Won):
        return value.text()
    return "-" if value is None else tactic_text(value)
