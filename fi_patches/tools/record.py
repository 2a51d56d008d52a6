"""Turn FlashInfer tuner output into a pin table, for every op in it: a v1 JSON config file
(``autotune(cache=...)``, also vLLM's ``autotune_configs.json`` and SGLang's per-rank files), a
v2 store directory (``autotune_v2``), or the live in-process cache. The files' forms are the
boundary's (:mod:`fi_patches.internals.tuner`, whose probe has FlashInfer's own writers write a
cache that this module must read back); this module reads the files, bounded.

Each cached winner is one :class:`Tuned` key and tactic. Keys of the runners the MXFP8 sections
specialize become section entries (adjacent row buckets with one tactic merged); every other
key becomes a ``[[pin]]`` entry, keys of one op, runner and extras that differ only in the tuned
dimension merged into bucket ranges with one tactic each.

Write a pin table's mapping as TOML (the standard library reads TOML but does not write it;
pin tables hold strings, numbers, booleans, nested lists and, in a ``[[pin]]`` tactic, inline
tables). TOML has no null: a table whose tactic holds one is written as JSON instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fi_patches.internals import tuner as fi_tuner
from fi_patches.internals import vllm as vllm_layout
from fi_patches.pins.keys import (
    ROWS,
    Profile,
    ShapePattern,
    TunerKey,
    as_tactic,
    bucket_rows,
    extras_text,
    parse_file_key,
    tactic_json,
)
from fi_patches.pins.reading import PinTableError, read_data_file
from fi_patches.pins.schema import LOW_LATENCY_MAX_ROWS
from fi_patches.pins.table import PinTable


class TunerCacheError(ValueError):
    """A tuner cache that cannot be read; the message names the file and why."""


@dataclass(frozen=True)
class Tuned:
    """One cached winner: FlashInfer's key and its tactic (in the runner's form)."""

    key: TunerKey
    tactic: Any

    @property
    def runner(self) -> str:
        return self.key.runner


@dataclass(frozen=True)
class SectionKey:
    """A key a section specializes: its section, weight ``(n, k)`` and row bucket."""

    section: str
    n: int
    k: int
    bucket: int


def section_of(key: TunerKey) -> SectionKey | None:
    """The section entry a key becomes, or None for a ``[[pin]]`` key. The sections' runners
    are tuned on ``mm_mxfp8``'s inputs, ``(rows, K)`` then ``(K, N)``."""
    from fi_patches.pinning.index import SPECIALIZATIONS

    for spec in SPECIALIZATIONS:
        if key.runner in spec.runners and key.op in spec.recorded_ops:
            profile = key.profile
            if len(profile) < 2 or len(profile[0]) != 2 or len(profile[1]) != 2:
                return None
            (rows, k), (k2, n) = profile[0], profile[1]
            if k != k2:
                return None
            return SectionKey(spec.section, int(n), int(k), int(rows))
    return None


Decision = tuple[str, Profile, str]
"""``(op, profile, lane)``: one winner of FlashInfer's tuner (see :func:`decision_of`)."""

Apart = dict[str, set[str]]
"""Per op, the runners tuned apart (see :func:`runners_apart`)."""


def runners_apart(sources: Iterable[Iterable[tuple[str, Profile, str]]]) -> Apart:
    """Per op, the runners that one source holds winners of for one profile (each source given
    as its winners' ``(op, profile, runner)``). FlashInfer's tuner keeps one winner per call, so
    two winners of one bucket in one cache come from calls that each offered one of them (an op
    called with a ``backend`` argument, as ``mm_bf16`` and ``bmm_fp8`` are): those runners are
    tuned apart, and each keeps its own buckets."""
    apart: Apart = {}
    for placed in sources:
        seen: dict[tuple[str, Profile], set[str]] = {}
        for op, profile, runner in placed:
            seen.setdefault((op, profile), set()).add(runner)
        for (op, _), runners in seen.items():
            if len(runners) > 1:
                apart.setdefault(op, set()).update(runners)
    return apart


def decision_of(key: TunerKey, apart: Apart | None = None) -> Decision:
    """What a cached winner decides. FlashInfer's tuner keeps one winning runner per op and
    bucketed profile, so runners of one op that won the same profile in two caches are two
    answers to one decision (lane ``""``). A runner tuned apart (``apart``) decides its own
    buckets, as do the runners the MXFP8 sections pin each on its own (with the runners they
    silence, by section)."""
    from fi_patches.pinning.index import SPECIALIZATIONS

    for spec in SPECIALIZATIONS:
        if key.op in spec.recorded_ops and key.runner in (*spec.runners, *spec.silences):
            return key.op, key.profile, spec.section
    if apart and key.runner in apart.get(key.op, ()):
        return key.op, key.profile, key.runner
    return key.op, key.profile, ""


MAX_CACHE_BYTES = 1 << 28
"""The largest tuner cache file read (256 MiB; FlashInfer's caches are a few MiB)."""

MAX_STORE_FILES = 1 << 16
"""Entry files read from one v2 store (FlashInfer writes one per key)."""


def _read_json(path: Path) -> object:
    return read_data_file(
        path, str(path), what="tuner cache file", max_bytes=MAX_CACHE_BYTES, suffixes=()
    )


def _tuned(key_text: str, runner: object, tactic: object) -> Tuned | None:
    key = parse_file_key(key_text)
    if key is None or runner != key.runner:
        return None
    return Tuned(key, as_tactic(tactic))


def from_v1_file(path: Path) -> tuple[list[Tuned], dict[str, Any]]:
    """Entries and ``_metadata`` of a v1 JSON config file."""
    try:
        data = _read_json(path)
    except PinTableError as exc:
        raise TunerCacheError(
            f"the tuner cache {exc.one_line()}; pass a FlashInfer v1 config file or a v2 store "
            "directory"
        ) from exc
    if not isinstance(data, dict):
        raise TunerCacheError(
            f"the tuner cache {path} holds a JSON {type(data).__name__}, not FlashInfer's "
            "object of cache entries"
        )
    entries = []
    for key, runner, tactic in fi_tuner.v1_winners(data):
        entry = _tuned(key, runner, tactic)
        if entry is not None:
            entries.append(entry)
    return entries, fi_tuner.v1_metadata(data)


def from_v2_store(root: Path) -> tuple[list[Tuned], dict[str, Any]]:
    """Entries of a v2 store root: ``<root>[/v2/<env>]/manifest.json`` and ``entries/*.json``
    (the boundary's :data:`~fi_patches.internals.tuner.V2_ENVIRONMENTS` and
    :data:`~fi_patches.internals.tuner.V2_ENTRIES`; a directory is never walked beyond them)."""
    entries: list[Tuned] = []
    meta: dict[str, Any] = {}
    envs = [root]
    for pattern in fi_tuner.V2_ENVIRONMENTS:
        envs += [p.parent for p in _listed(root, pattern) if p.parent not in envs]
    read = 0
    for env in envs:
        manifest = env / fi_tuner.V2_MANIFEST
        if manifest.is_file():
            try:
                data = _read_json(manifest)
            except PinTableError:
                data = None
            meta = fi_tuner.v2_metadata(data) or meta
        for file in _listed(env, fi_tuner.V2_ENTRIES):
            read += 1
            if read > MAX_STORE_FILES:
                raise TunerCacheError(
                    f"the v2 store {root} holds more than {MAX_STORE_FILES} entry files"
                )
            try:
                item = _read_json(file)
            except PinTableError:
                continue  # an entry being written, or not FlashInfer's: the others still count
            winner = fi_tuner.v2_winner(item)
            entry = _tuned(*winner) if winner is not None else None
            if entry is not None:
                entries.append(entry)
    return entries, meta


def from_tuner(tuner: Any = None) -> list[Tuned]:
    """Entries of the live in-process cache (``AutoTuner.get()`` by default)."""
    if tuner is None:
        tuner = fi_tuner.tuner()
    entries = []
    for key, value in list(fi_tuner.live_winners(tuner).items()):
        profile = tuple(tuple(int(d) for d in shape) for shape in key.nearest_profile)
        found = TunerKey(key.custom_op, key.runner_class_name, profile, extras_text(key.extras))
        entries.append(Tuned(found, as_tactic(value[0])))
    return entries


VLLM_FILES = f"*/{vllm_layout.AUTOTUNE_FILE}"
"""vLLM's v1 files under its cache directory: ``<dir>/<config hash>/autotune_configs.json``."""

SGLANG_FILES = "rank_tp*_pp*_dp*.json"
"""SGLang's per-rank v1 files in its cache directory."""

LAYOUTS = (
    "a v2 store (manifest.json, entries/), vLLM's flashinfer_autotune_cache tree or its "
    "<hash>/autotune_configs.json, or SGLang's rank_tp*_pp*_dp*.json"
)
"""The directory layouts a cache directory may have, for messages."""


def _listed(root: Path, pattern: str) -> list[Path]:
    try:
        return sorted(p for p in root.glob(pattern) if p.is_file())
    except OSError as exc:  # the directory vanished or cannot be listed while it is read
        raise TunerCacheError(
            f"the tuner cache directory {root} cannot be read ({exc.strerror or exc})"
        ) from exc


def is_v2_store(root: Path) -> bool:
    """Whether the directory ``root`` is a v2 store (a manifest at its root or one level down,
    as :func:`from_v2_store` reads it)."""
    return (root / fi_tuner.V2_MANIFEST).is_file() or any(
        _listed(root, pattern) for pattern in fi_tuner.V2_ENVIRONMENTS
    )


def layout_files(root: Path) -> list[Path]:
    """The v1 files of vLLM's or SGLang's cache layout in the directory ``root`` (only those
    places: a directory is never walked beyond them)."""
    return _listed(root, VLLM_FILES) + _listed(root, SGLANG_FILES)


def expand_sources(paths: Sequence[str]) -> list[str]:
    """``paths`` with each directory that is not a v2 store replaced by its cache files in
    vLLM's or SGLang's layout; raises ``TunerCacheError`` for a directory holding neither."""
    expanded: list[str] = []
    for path in paths:
        location = Path(path)
        if not location.is_dir() or is_v2_store(location):
            expanded.append(path)
            continue
        found = layout_files(location)
        if not found:
            raise TunerCacheError(
                f"{path} is a directory holding no tuner cache: expected {LAYOUTS}"
            )
        expanded += [str(f) for f in found]
    return list(dict.fromkeys(expanded))


def read_cache(path: str | Path) -> tuple[list[Tuned], dict[str, Any]]:
    """Entries and metadata of the cache at ``path``: a v1 file or a v2 store directory."""
    location = Path(path)
    if location.is_dir():
        if not is_v2_store(location):
            raise TunerCacheError(
                f"{location} is a directory but not a v2 store: expected {LAYOUTS}"
            )
        return from_v2_store(location)
    return from_v1_file(location)


# the [[pin]] entries -------------------------------------------------------------------------

Position = tuple[int, int]


def _positions(profile: Profile) -> list[Position]:
    return [(i, j) for i, shape in enumerate(profile) for j, _ in enumerate(shape)]


def tuned_positions(profiles: Sequence[Profile]) -> tuple[Position, ...]:
    """The positions of the tuned dimension among profiles of one op, runner and extras: the
    position (with those always equal to it) that, blanked, leaves the fewest distinct
    profiles; none when blanking any leaves them all distinct."""
    if len(profiles) < 2:
        return ()
    best: tuple[int, tuple[Position, ...]] = (len(profiles), ())
    for p in _positions(profiles[0]):
        if len({prof[p[0]][p[1]] for prof in profiles}) < 2:
            continue
        linked = tuple(
            q
            for q in _positions(profiles[0])
            if all(prof[q[0]][q[1]] == prof[p[0]][p[1]] for prof in profiles)
        )
        signatures = {_blank(prof, linked) for prof in profiles}
        if len(signatures) < best[0]:
            best = (len(signatures), linked)
    return best[1]


def _blank(profile: Profile, positions: Iterable[Position]) -> tuple[Any, ...]:
    blanked = set(positions)
    return tuple(
        tuple(None if (i, j) in blanked else d for j, d in enumerate(shape))
        for i, shape in enumerate(profile)
    )


def _pin_entries(entries: Sequence[Tuned]) -> Iterator[dict[str, Any]]:
    """``[[pin]]`` entries of ``entries``: per op and profile layout, the tuned dimension found
    over all its runners' keys, and consecutive buckets won by one runner with one tactic (and
    extras) merged into one range, so the ranges of an op's runners never overlap."""
    by_layout: dict[tuple[str, tuple[int, ...]], list[Tuned]] = {}
    for e in entries:
        layout = tuple(len(s) for s in e.key.profile)
        by_layout.setdefault((e.key.op, layout), []).append(e)
    for (op, _), group in sorted(by_layout.items()):
        tuned = tuned_positions(list(dict.fromkeys(e.key.profile for e in group)))
        by_signature: dict[tuple[Any, ...], list[Tuned]] = {}
        for e in group:
            by_signature.setdefault(_blank(e.key.profile, tuned), []).append(e)
        for _, members in sorted(by_signature.items(), key=lambda item: repr(item[0])):
            if not tuned:
                for e in sorted(members, key=lambda e: (e.key.runner, e.key.extras)):
                    shapes = ShapePattern(e.key.profile)
                    yield _pin(op, e.key.runner, e.key.extras, shapes, None, e.tactic)
                continue
            i, j = tuned[0]
            dims = tuple(
                tuple(ROWS if (a, b) in tuned else d for b, d in enumerate(shape))
                for a, shape in enumerate(members[0].key.profile)
            )
            buckets = sorted({int(e.key.profile[i][j]) for e in members})
            won: dict[tuple[str, str], dict[int, Any]] = {}
            for e in members:
                won.setdefault((e.key.runner, e.key.extras), {})[int(e.key.profile[i][j])] = (
                    as_tactic(e.tactic)
                )
            for (runner, extras), tactics in sorted(won.items()):
                # a range runs over consecutive buckets of the op that this runner won with one
                # tactic: a bucket another runner won (this one has no entry there) ends it
                ranges: list[list[Any]] = []
                previous = None
                for bucket in buckets:
                    tactic = tactics.get(bucket, _NONE)
                    if tactic is _NONE:
                        previous = None
                        continue
                    if ranges and previous is not None and ranges[-1][2] == tactic:
                        ranges[-1][1] = bucket
                    else:
                        ranges.append([bucket, bucket, tactic])
                    previous = bucket
                for lo, hi, tactic in ranges:
                    yield _pin(op, runner, extras, ShapePattern(dims), (lo, hi), tactic)


_NONE = object()


def _pin(
    op: str,
    runner: str,
    extras: str,
    shapes: ShapePattern,
    rows: tuple[int, int] | None,
    tactic: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "op": op,
        "runner": runner,
        "shapes": [list(shape) for shape in shapes.dims],
    }
    if rows is not None:
        entry["min_rows"], entry["max_rows"] = rows
    entry["extras"] = extras
    entry["tactic"] = tactic_json(tactic)
    return entry


# the section entries --------------------------------------------------------------------------


def _section_entries(
    entries: Iterable[tuple[SectionKey, Any]], bucket_of: Callable[[int], int]
) -> Iterator[tuple[str, dict[str, Any]]]:
    by_shape: dict[tuple[str, int, int], list[tuple[SectionKey, Any]]] = {}
    for key, tactic in entries:
        by_shape.setdefault((key.section, key.n, key.k), []).append((key, tactic))
    for (section, n, k), group in sorted(by_shape.items()):
        if section == "wide":
            for _, tactic in group:
                tile, *rest = tactic
                yield section, {"n": n, "k": k, "tile": tile, "tactic": tactic_json(rest)}
            continue
        ranges: list[list[Any]] = []
        for key, tactic in sorted(group, key=lambda item: item[0].bucket):
            lo, hi = bucket_rows(bucket_of, key.bucket)
            if ranges and ranges[-1][2] == tactic and ranges[-1][1] == lo - 1:
                ranges[-1][1] = hi
            else:
                ranges.append([lo, hi, tactic])
        for lo, hi, tactic in ranges:
            if section == "low_latency" and hi > LOW_LATENCY_MAX_ROWS:
                continue
            yield (
                section,
                {
                    "n": n,
                    "k": k,
                    "min_rows": lo,
                    "max_rows": hi,
                    "tactic": tactic_json(tactic),
                },
            )


FALLBACK = -1
"""The tactic FlashInfer caches when its runner's default won: nothing to pin."""


def is_fallback(tactic: Any) -> bool:
    """Whether a cached winner is FlashInfer's default tactic (``-1``), which a table cannot
    pin: :func:`to_table` leaves those keys out, and FlashInfer keeps its default there."""
    return isinstance(tactic, int) and not isinstance(tactic, bool) and tactic == FALLBACK


def to_table(
    entries: Iterable[Tuned],
    *,
    device: str,
    flashinfer_version: str,
    source: str,
    bucket_of: Callable[[int], int] | None,
    note: str = "",
) -> PinTable:
    """A validated pin table of ``entries`` chosen on ``device`` and FlashInfer's version;
    ``source`` and ``note`` become the table's provenance (``[meta]`` source and note). Keys
    whose winner is FlashInfer's default (:func:`is_fallback`) are left out.
    ``bucket_of`` maps rows to ``mm_mxfp8``'s buckets (None where FlashInfer is absent: keys
    of the sections are then written as ``[[pin]]`` entries too)."""
    sectioned: list[tuple[SectionKey, Any]] = []
    generic: list[Tuned] = []
    for entry in entries:
        if is_fallback(entry.tactic):
            continue
        key = section_of(entry.key) if bucket_of is not None else None
        if key is None:
            generic.append(entry)
        else:
            sectioned.append((key, entry.tactic))
    sections: dict[str, list[dict[str, Any]]] = {}
    if bucket_of is not None:
        for section, item in _section_entries(sectioned, bucket_of):
            sections.setdefault(section, []).append(item)
    pins = list(_pin_entries(generic))
    if pins:
        sections["pin"] = pins
    meta = {"device": device, "flashinfer": f"=={flashinfer_version}", "source": source}
    if note:
        meta["note"] = note
    return PinTable.from_mapping({"meta": meta, **sections}, source=source)


def _basic(text: str) -> str:
    """``text`` as a TOML basic string: JSON's escapes, no surrogate pairs, and DEL escaped too
    (JSON leaves it raw; TOML forbids it)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        if "\n" in value:  # a multi-line basic string: each line as a basic string's inside
            lines = [_basic(line)[1:-1] for line in value.split("\n")]
            return '"""\n' + "\n".join(lines) + '"""'
        return _basic(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{json.dumps(str(k))} = {_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    if value is None:
        raise TypeError("TOML has no null; write this table as .json")
    raise TypeError(f"cannot write {type(value).__name__} {value!r} to a pin table")


def dumps(data: Mapping[str, Any]) -> str:
    """``data`` (a ``PinTable.to_mapping()``) as TOML: ``[meta]`` then arrays of tables."""
    lines: list[str] = []
    meta = data.get("meta", {})
    lines.append("[meta]")
    lines.extend(f"{key} = {_value(value)}" for key, value in meta.items())
    for section, entries in data.items():
        if section == "meta":
            continue
        for entry in entries:
            lines.append("")
            lines.append(f"[[{section}]]")
            lines.extend(f"{key} = {_value(value)}" for key, value in entry.items())
    return "\n".join(lines) + "\n"
