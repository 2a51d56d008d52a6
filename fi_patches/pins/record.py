"""Turn a FlashInfer tuner cache into a pin table: a v1 JSON config file (``autotune(cache=...)``),
a v2 store directory (``autotune_v2``), or the live in-process cache. One entry per tuned bucket
of the pinnable runners, adjacent buckets with the same tactic merged."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fi_patches.features import FEATURES
from fi_patches.internals.flashinfer import MXFP8_OP
from fi_patches.pins.errors import PinTableError
from fi_patches.pins.files import read_data_file
from fi_patches.pins.table import PinTable

_RECORDED: dict[tuple[str, str], str] = {
    **{
        (MXFP8_OP, runner.class_name): runner.section
        for feature in FEATURES
        for runner in feature.runners
        if not runner.silenced
    },
    **{(op, cls): section for feature in FEATURES for op, cls, section in feature.recorded},
}
"""``(custom op, runner class) -> pin-table section`` of every tuned runner whose cached
winners become pins, as the features declare them (a silenced runner's tactics are of another
form and are never recorded)."""

MXFP8_OPS = tuple(dict.fromkeys(op for op, _ in _RECORDED))
"""``mm_mxfp8``'s custom op, and the one fi_patches' wide runner is tuned under."""

SECTION_OF_RUNNER = {cls: section for (_, cls), section in _RECORDED.items()}
"""Runner class -> the pin-table section its winners are recorded in."""


class TunerCacheError(ValueError):
    """A tuner cache that cannot be read; the message names the file and why."""


@dataclass(frozen=True)
class TunedEntry:
    """One cached winner: weight ``(n, k)``, the bucket's rows, the runner and its tactic."""

    runner: str
    n: int
    k: int
    bucket: int
    tactic: Any


def _top_level(text: str) -> list[str]:
    """The comma-separated elements of a tuple's repr, split at depth 1 (quotes respected)."""
    parts, depth, start, quote = [], 0, 1, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                parts.append(text[start:i])
        elif ch == "," and depth == 1:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in parts if p.strip()]


def parse_file_key(file_key: str) -> tuple[str, str, tuple[tuple[int, ...], ...]] | None:
    """``(custom_op, runner_class_name, nearest_profile)`` of FlashInfer's ``file_key`` string
    ``str((custom_op, runner, profile, extras))``; the extras (reprs of DSL classes) are
    skipped. None when the key is not of that form."""
    parts = _top_level(file_key)
    if len(parts) < 3:
        return None
    try:
        op, runner, profile = (ast.literal_eval(p) for p in parts[:3])
    except (ValueError, SyntaxError):
        return None
    if not (isinstance(op, str) and isinstance(runner, str) and isinstance(profile, tuple)):
        return None
    return op, runner, profile


def _entry(op: str, runner: str, profile: Any, tactic: Any) -> TunedEntry | None:
    if op not in MXFP8_OPS or runner not in SECTION_OF_RUNNER:
        return None
    (rows, k), (k2, n) = profile[0], profile[1]
    if k != k2:
        return None
    return TunedEntry(runner, int(n), int(k), int(rows), _tuple(tactic))


def _tuple(tactic: Any) -> Any:
    return tuple(_tuple(t) for t in tactic) if isinstance(tactic, (list, tuple)) else tactic


MAX_CACHE_BYTES = 1 << 28
"""The largest tuner cache file read (256 MiB; FlashInfer's caches are a few MiB)."""


def _read_json(path: Path) -> object:
    return read_data_file(
        path, str(path), what="tuner cache file", max_bytes=MAX_CACHE_BYTES, suffixes=()
    )


def from_v1_file(path: Path) -> tuple[list[TunedEntry], dict[str, Any]]:
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
    for key, value in data.items():
        if key.startswith("_") or not isinstance(value, list) or len(value) < 2:
            continue
        parsed = parse_file_key(key)
        if parsed is None:
            continue
        entry = _entry(parsed[0], value[0], parsed[2], value[1])
        if entry is not None:
            entries.append(entry)
    metadata = data.get("_metadata", {})
    return entries, dict(metadata) if isinstance(metadata, dict) else {}


def from_v2_store(root: Path) -> tuple[list[TunedEntry], dict[str, Any]]:
    """Entries of every ``entries/*.json`` under a v2 store root, and a manifest's metadata."""
    entries: list[TunedEntry] = []
    meta: dict[str, Any] = {}
    for manifest in sorted(root.rglob("manifest.json")):
        try:
            data = _read_json(manifest)
        except PinTableError:
            continue
        if isinstance(data, dict):
            found = data.get("metadata", data)  # 0.7.x manifests are flat
            meta = dict(found) if isinstance(found, dict) else meta
    for file in sorted(root.rglob("entries/*.json")):
        try:
            data = _read_json(file)
        except PinTableError:
            continue  # an entry being written, or not FlashInfer's: the others still count
        if not isinstance(data, dict):
            continue
        parsed = parse_file_key(str(data.get("key", "")))
        if parsed is None:
            continue
        entry = _entry(parsed[0], str(data.get("runner")), parsed[2], data.get("tactic"))
        if entry is not None:
            entries.append(entry)
    return entries, meta


def from_tuner(tuner: Any = None) -> list[TunedEntry]:
    """Entries of the live in-process cache (``AutoTuner.get()`` by default)."""
    from fi_patches.internals import flashinfer as fi

    if tuner is None:
        tuner = fi.tuner()
    entries = []
    for key, value in list(fi.live_winners(tuner).items()):
        entry = _entry(key.custom_op, key.runner_class_name, key.nearest_profile, value[0])
        if entry is not None:
            entries.append(entry)
    return entries


def read_cache(path: str | Path) -> tuple[list[TunedEntry], dict[str, Any]]:
    """Entries and metadata of the cache at ``path`` (a v1 file or a v2 store directory)."""
    location = Path(path)
    if location.is_dir():
        return from_v2_store(location)
    return from_v1_file(location)


def bucket_rows(bucket_of: Callable[[int], int], bucket: int) -> tuple[int, int]:
    """The rows ``lo..hi`` that FlashInfer's tuner files under ``bucket``."""
    rows = [r for r in range(1, bucket + 1) if bucket_of(r) == bucket]
    return (min(rows), max(rows)) if rows else (bucket, bucket)


def _merged(
    entries: Iterable[TunedEntry], bucket_of: Callable[[int], int]
) -> Iterator[dict[str, Any]]:
    by_shape: dict[tuple[str, int, int], list[TunedEntry]] = {}
    for e in entries:
        by_shape.setdefault((e.runner, e.n, e.k), []).append(e)
    for (runner, n, k), group in sorted(by_shape.items()):
        ranges: list[list[Any]] = []
        for e in sorted(group, key=lambda e: e.bucket):
            lo, hi = bucket_rows(bucket_of, e.bucket)
            if ranges and ranges[-1][2] == e.tactic and ranges[-1][1] == lo - 1:
                ranges[-1][1] = hi
            else:
                ranges.append([lo, hi, e.tactic])
        for lo, hi, tactic in ranges:
            yield {
                "runner": runner,
                "n": n,
                "k": k,
                "min_rows": lo,
                "max_rows": hi,
                "tactic": tactic,
            }


def _as_toml(tactic: Any) -> Any:
    return [_as_toml(t) for t in tactic] if isinstance(tactic, tuple) else tactic


def to_table(
    entries: Iterable[TunedEntry],
    *,
    device: str,
    flashinfer_version: str,
    source: str,
    bucket_of: Callable[[int], int],
    note: str = "",
) -> PinTable:
    """A validated pin table of ``entries`` chosen on ``device`` and FlashInfer's version;
    ``source`` and ``note`` become the table's provenance (``[meta]`` source and note)."""
    sections: dict[str, list[dict[str, Any]]] = {}
    for item in _merged(entries, bucket_of):
        section = SECTION_OF_RUNNER[item.pop("runner")]
        if section == "low_latency" and item["max_rows"] > 8:
            continue
        if section == "wide":
            tile, *tactic = item["tactic"]
            sections.setdefault(section, []).append(
                {"n": item["n"], "k": item["k"], "tile": tile, "tactic": list(tactic)}
            )
            continue
        item["tactic"] = _as_toml(item["tactic"])
        sections.setdefault(section, []).append(item)
    meta = {"device": device, "flashinfer": f"=={flashinfer_version}", "source": source}
    if note:
        meta["note"] = note
    return PinTable.from_mapping({"meta": meta, **sections}, source=source)
