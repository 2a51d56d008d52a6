"""``PinTable``: validated pins loaded from TOML, JSON or a mapping, with fast lookups; and the
tables this process holds by default.

The pin state this process holds below the engine (the second part of this module): the
default table (``FI_PATCHES_PINS``, a path, else what ``register_pins`` set, else an empty
table), the pin files read so far, and the one way every cache of pin state is invalidated.

That way is a generation counter, read when a cache is used: :data:`GENERATION` moves on
whenever the tables that could serve a call may have changed, and :data:`REFRESHED` (which moves
:data:`GENERATION` on too) only at ``fi_patches.refresh()``, for what holds until the installed
FlashInfer, the device or a pin file is read again (files read, tables checked, what runners
offer). A cache is a :class:`Cache` or, keyed weakly on a table or a FlashInfer class so as not
to keep it alive, a :class:`WeakCache`; either empties itself on first use after its counter
moved on, and hot paths compare ``GENERATION[0]`` themselves. ``fi_patches.refresh()`` reaches
the counters through the one hook registered here."""

from __future__ import annotations

import difflib
import os
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_patches import _env
from fi_patches import _text as words
from fi_patches._text import error_text, safe_name
from fi_patches.compat.features import on_refresh
from fi_patches.pins.reading import (
    LEFT_OUT,
    MAX_FILE_BYTES,
    FieldReader,
    PinProblem,
    PinTableError,
    kind,
    read_pin_file,
)
from fi_patches.pins.schema import (
    MAX_ENTRIES,
    MAX_PIN_ENTRIES,
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

if TYPE_CHECKING:
    from fi_patches.compat.features import FeatureStatus

__all__ = [
    "ENV",
    "GENERATION",
    "MAX_FILE_BYTES",
    "REFRESHED",
    "Cache",
    "PinTable",
    "WeakCache",
    "as_table",
    "bump",
    "covering",
    "default_pins",
    "describe_default_pins",
    "lookup",
    "lookup_wide",
    "refreshed",
    "register_pins",
    "registered_pins",
]


def covering(group: Sequence[Any], rows: int) -> Any:
    """The first entry of ``group`` (row-range entries of one weight shape, priority order)
    whose ``min_rows..max_rows`` holds ``rows``, or None: the one rule by which a row-range
    entry serves a call, for a table's own lookups and the engine's merged index alike."""
    for entry in group:
        if entry.min_rows <= rows <= entry.max_rows:
            return entry
    return None


def lookup(tables: Iterable[PinTable], section: str, n: int, k: int, rows: int) -> Any:
    """The first entry of ``section`` covering ``(n, k, rows)`` in ``tables`` (priority order),
    or None."""
    for table in tables:
        entry = table.row_pin(section, n, k, rows)
        if entry is not None:
            return entry
    return None


def lookup_wide(tables: Iterable[PinTable], n: int, k: int, tile: int) -> Any:
    """The first ``[[wide]]`` entry for ``(n, k, tile)`` in ``tables``, or None."""
    for table in tables:
        entry = table.wide_pin(n, k, tile)
        if entry is not None:
            return entry
    return None


class _Progress:
    """Where :meth:`PinTable.from_mapping` is, to name it if something unexpected fails."""

    def __init__(self) -> None:
        self.where = "top level"
        self.reader: FieldReader | None = None


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
        """Validate ``data`` (the parsed form of a pin file) into a table.

        Raises :class:`PinTableError` and nothing else: an unexpected error while reading an
        entry is reported as a problem of that entry and field."""
        progress = _Progress()
        try:
            return cls._from_mapping(data, source, progress)
        except PinTableError:
            raise
        except Exception as exc:
            field = progress.reader.field if progress.reader is not None else None
            what = f"{field} could not be read" if field else "could not be read"
            raise PinTableError(
                [
                    PinProblem(
                        source,
                        progress.where,
                        None,
                        None,
                        f"{what} ({error_text(exc, 200)})",
                    )
                ]
            ) from exc

    @classmethod
    def _from_mapping(cls, data: object, source: str, progress: _Progress) -> PinTable:
        if not isinstance(data, Mapping):
            raise PinTableError(
                [PinProblem(source, "top level", None, None, f"must be a table, not {kind(data)}")]
            )
        problems: list[PinProblem] = []
        known = ("meta", *SECTIONS)
        for key in data:
            if key not in known:
                close = (
                    difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                    if isinstance(key, str) and len(key) <= 64
                    else []
                )
                hint = f"; did you mean {close[0]}?" if close else f" (known: {', '.join(known)})"
                problems.append(
                    PinProblem(
                        source,
                        "top level",
                        safe_name(key),
                        LEFT_OUT,
                        f"is not a known section{hint}",
                    )
                )
        for key in getattr(data, "keyed_twice", ()):
            problems.append(PinProblem(source, "top level", key, LEFT_OUT, "is given twice"))
        meta = None
        if "meta" not in data:
            problems.append(
                PinProblem(source, "[meta]", None, None, "is required (device and flashinfer)")
            )
        else:
            progress.where = "[meta]"
            progress.reader = FieldReader(source, "[meta]", data["meta"], problems)
            meta = parse_meta(progress.reader)
            if meta is None and not problems:  # parse_meta records why; never apply without
                problems.append(PinProblem(source, "[meta]", None, None, "is invalid"))
        sections: dict[str, tuple[Any, ...]] = {}
        for name, section in SECTIONS.items():
            progress.where, progress.reader = f"[[{name}]]", None
            raw = data.get(name, [])
            if not isinstance(raw, list):
                problems.append(
                    PinProblem(
                        source,
                        f"[[{name}]]",
                        None,
                        None,
                        f"must be an array of tables, not {kind(raw)}",
                    )
                )
                continue
            limit = MAX_PIN_ENTRIES if name == "pin" else MAX_ENTRIES
            if len(raw) > limit:
                problems.append(
                    PinProblem(
                        source,
                        f"[[{name}]]",
                        None,
                        None,
                        f"has {len(raw)} entries; a section holds at most {limit}",
                    )
                )
                continue
            entries = []
            for position, item in enumerate(raw, start=1):
                progress.where = f"[[{name}]] #{position}"
                progress.reader = FieldReader(source, progress.where, item, problems)
                entry = section.parse(progress.reader, position)
                if entry is not None:
                    entries.append(entry)
            progress.where, progress.reader = f"[[{name}]]", None
            if section.cross_check is not None:
                entries = list(section.cross_check(name, entries, source, problems))
            sections[name] = tuple(entries)
        if problems or meta is None:
            raise PinTableError(problems)
        return cls(meta, sections, source)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PinTable:
        """Load and validate a ``.toml`` or ``.json`` pin file of at most
        :data:`MAX_FILE_BYTES`. Raises :class:`PinTableError` naming the file (and the entry
        and field where known) for anything wrong with it, and nothing else."""
        file = Path(path)
        source = str(file)
        try:
            data = read_pin_file(file, source)
        except PinTableError:
            raise
        except Exception as exc:
            raise PinTableError(
                [
                    PinProblem(
                        source,
                        "file",
                        None,
                        None,
                        f"could not be read ({error_text(exc, 200)})",
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
        return covering(group, rows) if group else None

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

    def skip_reason(self, device: str | None, version: Version | None = None) -> str | None:
        """Why this table does not apply to ``device``, or None. A table chosen on another
        FlashInfer release still applies, entry by entry (see :meth:`other_release`)."""
        if self.meta.device != "*" and device != self.meta.device:
            return (
                f"pins in {self.source} were chosen on {self.meta.device}; "
                f"this device is {device or 'none'}"
            )
        return None

    def other_release(self, version: Version | None) -> str | None:
        """A sentence when ``version`` is not a release the pins were chosen on, else None:
        each entry is then checked against the installed release before it applies."""
        if version is not None and not self.meta.flashinfer.contains(version, prereleases=True):
            return (
                f"pins in {self.source} were chosen on FlashInfer {self.meta.flashinfer}; "
                f"installed is {version}, so each entry is checked against it"
            )
        return None

    def without(self, dropped: Mapping[str, set[int]]) -> PinTable:
        """This table without the entries ``dropped`` names (section -> entry numbers)."""
        kept = {
            name: tuple(e for e in entries if e.index not in dropped.get(name, set()))
            for name, entries in self.sections.items()
        }
        return PinTable(self.meta, kept, self.source)

    def to_mapping(self) -> dict[str, Any]:
        """The table in its file form (``from_mapping(t.to_mapping())`` gives it back)."""
        data: dict[str, Any] = {"meta": self.meta.to_mapping()}
        for name, entries in self.sections.items():
            if entries:
                data[name] = [entry.to_mapping() for entry in entries]
        return data


# the default table and the pin state's generations ----------

ENV = _env.PINS.name

GENERATION = [0]
"""The generation of the pin state: one counter that changes whenever the tables that could
serve a call may have (a block left, process tables added or removed, pins suspended or resumed,
a table registered, ``fi_patches.refresh()``). Hot paths cache on it, with the context's scope,
at the cost of one read; it is in a list so that readers bind it once (``GENERATION[0]``)."""

_generation_lock = threading.Lock()


REFRESHED = [0]
"""The generation of what pin state was read and checked against: moves on only at
``fi_patches.refresh()`` (then :data:`GENERATION` moves on too)."""


def bump() -> None:
    """Mark every cache keyed on the generation stale."""
    with _generation_lock:
        GENERATION[0] += 1


@on_refresh
def refreshed() -> None:
    """``fi_patches.refresh()``: every cache of pin state, of either counter, is stale."""
    with _generation_lock:
        REFRESHED[0] += 1
        GENERATION[0] += 1


K = TypeVar("K")
V = TypeVar("V")


class _Stamped(Generic[K, V]):
    """The counter a cache holds for, and the value it had when the cache was last emptied."""

    _counter: list[int]
    _at: int

    def _stamp(self, counter: list[int]) -> None:
        self._counter = counter
        self._at = counter[0]

    def fresh(self) -> Any:
        """The cache itself, emptied first if its counter moved on since it was filled."""
        now = self._counter[0]
        if self._at != now:
            self.clear()  # type: ignore[attr-defined]
            self._at = now
        return self


class Cache(_Stamped[K, V], dict[K, V]):
    """A dict of values that hold for one generation of ``counter`` (:data:`GENERATION` or
    :data:`REFRESHED`): read and write it through :meth:`fresh`."""

    def __init__(self, counter: list[int]) -> None:
        dict.__init__(self)
        self._stamp(counter)


class WeakCache(_Stamped[K, V], weakref.WeakKeyDictionary[K, V]):
    """A :class:`Cache` keyed weakly (on a table or a FlashInfer class, which it must not keep
    alive)."""

    def __init__(self, counter: list[int]) -> None:
        weakref.WeakKeyDictionary.__init__(self)
        self._stamp(counter)


_lock = threading.Lock()
_registered: PinTable | None = None


_file_cache: Cache[str, PinTable] = Cache(REFRESHED)
"""Pin files read, by path: read again after ``fi_patches.refresh()``."""


def as_table(table: PinTable | str | os.PathLike[str] | Mapping[str, object]) -> PinTable:
    """``table`` itself, the file at a path, or a validated mapping."""
    if isinstance(table, PinTable):
        return table
    if isinstance(table, Mapping):
        return PinTable.from_mapping(table)
    return _load_file(Path(table))


def _load_file(path: Path) -> PinTable:
    """The table in ``path``, read once per process (``fi_patches.refresh()`` reads it again):
    hot paths resolve the default table on every call and must not touch the disk."""
    key = str(path)
    with _lock:
        cached = _file_cache.fresh().get(key)
    if cached is None:
        cached = PinTable.from_file(path)
        with _lock:
            _file_cache.fresh()[key] = cached
    return cached


def register_pins(table: PinTable | str | os.PathLike[str] | Mapping[str, object] | None) -> None:
    """Make ``table`` the default for ``pinned_tactics()`` (``FI_PATCHES_PINS`` still wins);
    None unregisters. The table is validated now, so a bad one raises here."""
    global _registered
    resolved = None if table is None else as_table(table)
    with _lock:
        _registered = resolved
    bump()


def registered_pins() -> PinTable | None:
    """What :func:`register_pins` set, or None."""
    return _registered


def default_pins() -> PinTable:
    """The table ``pinned_tactics()`` uses when given none; raises :class:`PinTableError`
    when ``FI_PATCHES_PINS`` names a bad file."""
    path = _env.get(_env.PINS)
    if path:
        return _load_file(Path(path))
    with _lock:
        return _registered if _registered is not None else PinTable.empty()


def describe_default_pins(feature: str, record: FeatureStatus) -> str:
    """One sentence on what the default table holds for ``feature`` and whether it applies."""
    from fi_patches.compat.features import feature as declared

    sections = list(declared(feature).sections)
    if not sections:
        return ""
    try:
        table = default_pins()
    except PinTableError as exc:
        return f"{ENV} is invalid: {exc.problems[0]}"
    count = sum(len(table.entries(name)) for name in sections)
    if count == 0:
        return (
            f"no pins ({ENV} unset and none registered)"
            if not _env.get(_env.PINS)
            else f"no {words.sections(sections, 'or')} entries in {table.source}"
        )
    from fi_patches.compat.target import current_device, parse_version

    # The device the pins would run on, as pinned_tactics() judges it (a feature of any device
    # records "any", which says nothing of the table's device).
    skip = table.skip_reason(current_device().arch, parse_version(record.flashinfer))
    kinds = words.sections(sections)
    what = f"{words.counted(count, f'{kinds} entry', f'{kinds} entries')} from {table.source}"
    return f"{what} skipped: {skip}" if skip else what
