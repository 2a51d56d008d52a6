"""``PinTable``: validated pins loaded from TOML, JSON or a mapping, with fast lookups."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomllib
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_patches.pins.errors import PinProblem, PinTableError
from fi_patches.pins.fields import FieldReader
from fi_patches.pins.schema import (
    SECTIONS,
    CuteDslPin,
    CuteDslTactic,
    LowLatencyPin,
    LowLatencyTactic,
    PinMeta,
    RowRangePin,
    WidePin,
    parse_meta,
)


class PinTable:
    """Pinned tactics per runner, weight shape and row range, with the meta they were chosen on.

    Build it with :meth:`from_file` or :meth:`from_mapping`; both validate the whole table
    and raise :class:`PinTableError` listing every problem, so a bad table is never applied.
    """

    def __init__(self, meta: PinMeta, sections: Mapping[str, tuple[Any, ...]], source: str) -> None:
        self.meta = meta
        self.source = source
        self.sections: dict[str, tuple[Any, ...]] = {
            name: tuple(sections.get(name, ())) for name in SECTIONS
        }
        self._wide: dict[tuple[int, int, int], WidePin] = {
            (e.n, e.k, e.tile): e for e in self.sections.get("wide", ())
        }
        self._row_index: dict[str, dict[tuple[int, int], tuple[RowRangePin, ...]]] = {}
        for name, entries in self.sections.items():
            index: dict[tuple[int, int], list[RowRangePin]] = {}
            for entry in entries:
                if isinstance(entry, RowRangePin):
                    index.setdefault((entry.n, entry.k), []).append(entry)
            self._row_index[name] = {shape: tuple(group) for shape, group in index.items()}

    # construction -------------------------------------------------------------------------

    @classmethod
    def empty(cls) -> PinTable:
        """A table with no pins, valid on every device and release."""
        return cls(PinMeta("*", SpecifierSet()), {}, "<empty>")

    @classmethod
    def from_mapping(cls, data: object, source: str = "<mapping>") -> PinTable:
        """Validate ``data`` (the parsed form of a pin file) into a table."""
        problems: list[PinProblem] = []
        if not isinstance(data, Mapping):
            raise PinTableError(
                [
                    PinProblem(
                        source,
                        "top level",
                        None,
                        None,
                        f"must be a table, not {type(data).__name__}",
                    )
                ]
            )
        for key in data:
            if key != "meta" and key not in SECTIONS:
                problems.append(
                    PinProblem(
                        source,
                        "top level",
                        str(key),
                        "...",
                        f"is not a known section (known: meta, {', '.join(SECTIONS)})",
                    )
                )
        meta = None
        if "meta" not in data:
            problems.append(
                PinProblem(source, "[meta]", None, None, "is required (device and flashinfer)")
            )
        else:
            meta = parse_meta(FieldReader(source, "[meta]", data["meta"], problems))
        sections: dict[str, tuple[Any, ...]] = {}
        for name, section in SECTIONS.items():
            raw = data.get(name, [])
            if not isinstance(raw, list):
                problems.append(
                    PinProblem(source, f"[[{name}]]", None, None, "must be an array of tables")
                )
                continue
            entries = []
            for position, item in enumerate(raw, start=1):
                reader = FieldReader(source, f"[[{name}]] #{position}", item, problems)
                entry = section.parse(reader, position)
                if entry is not None:
                    entries.append(entry)
            if section.cross_check is not None:
                entries = list(section.cross_check(name, entries, source, problems))
            sections[name] = tuple(entries)
        if problems:
            raise PinTableError(problems)
        assert meta is not None
        return cls(meta, sections, source)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PinTable:
        """Load and validate a ``.toml`` or ``.json`` pin file."""
        file = Path(path)
        source = str(file)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise PinTableError(
                [PinProblem(source, "file", None, None, f"cannot be read ({exc.strerror or exc})")]
            ) from exc
        suffix = file.suffix.lower()
        try:
            if suffix == ".toml":
                data: object = tomllib.loads(text)
            elif suffix == ".json":
                data = json.loads(text)
            else:
                raise PinTableError(
                    [PinProblem(source, "file", None, None, "must end in .toml or .json")]
                )
        except tomllib.TOMLDecodeError as exc:
            raise PinTableError([PinProblem(source, "TOML", None, None, str(exc))]) from exc
        except json.JSONDecodeError as exc:
            raise PinTableError(
                [
                    PinProblem(
                        source,
                        "JSON",
                        None,
                        None,
                        f"{exc.msg} (line {exc.lineno} column {exc.colno})",
                    )
                ]
            ) from exc
        return cls.from_mapping(data, source=source)

    # queries ------------------------------------------------------------------------------

    def __bool__(self) -> bool:
        return any(self.sections.values())

    def __repr__(self) -> str:
        counts = ", ".join(
            f"{name}={len(entries)}" for name, entries in self.sections.items() if entries
        )
        return f"PinTable({self.source!r}, {counts or 'empty'})"

    def entries(self, section: str) -> tuple[Any, ...]:
        """The entries of ``section`` (e.g. ``low_latency``), in file order."""
        return self.sections[section]

    def row_pin(self, section: str, n: int, k: int, rows: int) -> RowRangePin | None:
        """The entry of ``section`` covering ``rows`` rows of the weight shape ``(n, k)``."""
        group = self._row_index[section].get((n, k))
        if group:
            for entry in group:
                if entry.min_rows <= rows <= entry.max_rows:
                    return entry
        return None

    def cute_dsl_tactic(self, n: int, k: int, rows: int) -> CuteDslTactic | None:
        """The pinned ``cute-dsl`` tactic for ``rows`` rows of the weight ``(n, k)``, if any."""
        entry = self.row_pin("cute_dsl", n, k, rows)
        return entry.tactic if isinstance(entry, CuteDslPin) else None

    def low_latency_tactic(self, n: int, k: int, rows: int) -> LowLatencyTactic | None:
        """The pinned low-latency tactic for ``rows`` rows of the weight ``(n, k)``, if any."""
        entry = self.row_pin("low_latency", n, k, rows)
        return entry.tactic if isinstance(entry, LowLatencyPin) else None

    def wide_pin(self, n: int, k: int, tile: int) -> WidePin | None:
        """The ``[[wide]]`` entry for the weight ``(n, k)`` at activation tile ``tile``, if any."""
        return self._wide.get((n, k, tile))

    def skip_reason(self, device: str | None, version: Version | None) -> str | None:
        """Why this table does not apply to ``device`` and FlashInfer ``version``, or None."""
        if self.meta.device != "*" and device != self.meta.device:
            return (
                f"pins in {self.source} were chosen on {self.meta.device}; "
                f"this device is {device or 'none'}"
            )
        if version is not None and not self.meta.flashinfer.contains(version, prereleases=True):
            return (
                f"pins in {self.source} were chosen on FlashInfer {self.meta.flashinfer}; "
                f"installed is {version}"
            )
        return None

    def to_mapping(self) -> dict[str, Any]:
        """The table in its file form (``from_mapping(t.to_mapping())`` gives it back)."""
        data: dict[str, Any] = {"meta": self.meta.to_mapping()}
        for name, entries in self.sections.items():
            if entries:
                data[name] = [entry.to_mapping() for entry in entries]
        return data
