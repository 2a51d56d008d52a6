"""Which pin tables are active: a context-local stack (``pinned_tactics()`` blocks, innermost
first) over process-wide tables (``fi_patches.auto``). One installed wrapper reads it, so
entering and leaving never patches or unpatches anything per thread.

Each scope keeps a merged index, ``section -> (n, k) -> entries in priority order`` (and the
same keyed ``(k, n)``, the orientation of ``mm_mxfp8``'s column-major weight, so the hot path
looks a tensor's ``shape`` up as it is), costing one context-variable read and two dict lookups.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fi_patches.pins.table import PinTable


class SectionIndex:
    """One section's active entries by weight shape, in priority order."""

    __slots__ = ("by_kn", "by_nk")

    def __init__(self, by_nk: dict[tuple[int, int], tuple[Any, ...]]) -> None:
        self.by_nk = by_nk
        self.by_kn = {(k, n): group for (n, k), group in by_nk.items()}


Index = dict[str, SectionIndex]


def _merge(tables: tuple[PinTable, ...]) -> Index:
    merged: dict[str, dict[tuple[int, int], list[Any]]] = {}
    for table in tables:
        for section, entries in table.sections.items():
            for entry in entries:
                if hasattr(entry, "min_rows"):
                    merged.setdefault(section, {}).setdefault((entry.n, entry.k), []).append(entry)
    return {
        section: SectionIndex({shape: tuple(group) for shape, group in shapes.items()})
        for section, shapes in merged.items()
    }


class _Scope:
    __slots__ = ("_merged", "_merged_version", "include_process", "index", "tables")

    def __init__(self, tables: tuple[PinTable, ...], include_process: bool = True) -> None:
        self.tables = tables  # innermost first
        self.include_process = include_process
        self.index: Index | None = _merge(tables) if tables else None
        self._merged: Index | None = None
        self._merged_version = -1

    def with_process(self) -> Index | None:
        """The index over this scope's tables and then the process-wide ones."""
        if not self.include_process or not _process_tables:
            return self.index
        if self._merged_version != _process_version:
            self._merged = _merge(self.tables + _process_tables)
            self._merged_version = _process_version
        return self._merged


_EMPTY = _Scope(())
_scope: contextvars.ContextVar[_Scope] = contextvars.ContextVar("fi_patches_pins", default=_EMPTY)
_process_lock = threading.Lock()
_process_tables: tuple[PinTable, ...] = ()
_process_version = 0
_suspended: str | None = None


def current_index() -> Index | None:
    """The merged index of the pins active here, or None when there are none (fast path)."""
    scope = _scope.get()
    if _process_tables and scope.include_process:
        return scope.with_process()
    return scope.index


def covering(group: tuple[Any, ...], rows: int) -> Any:
    """The first entry of ``group`` (one weight shape, priority order) covering ``rows``."""
    for entry in group:
        if entry.min_rows <= rows <= entry.max_rows:
            return entry
    return None


def find(index: Index, section: str, n: int, k: int, rows: int) -> Any:
    """The highest-priority entry of ``section`` covering ``rows`` rows of weight ``(n, k)``."""
    shapes = index.get(section)
    group = shapes.by_nk.get((n, k)) if shapes is not None else None
    return covering(group, rows) if group else None


def active_tables() -> tuple[PinTable, ...]:
    """The tables consulted now, in priority order (none while pins are suspended)."""
    if _suspended is not None:
        return ()
    scope = _scope.get()
    if scope.include_process and _process_tables:
        return scope.tables + _process_tables
    return scope.tables


def lookup(tables: tuple[PinTable, ...], section: str, n: int, k: int, rows: int) -> Any:
    """The first entry of ``section`` covering ``(n, k, rows)`` in ``tables``, or None."""
    for table in tables:
        entry = table.row_pin(section, n, k, rows)
        if entry is not None:
            return entry
    return None


def lookup_wide(tables: tuple[PinTable, ...], n: int, k: int, tile: int) -> Any:
    """The first ``[[wide]]`` entry for ``(n, k, tile)`` in ``tables``, or None."""
    for table in tables:
        entry = table.wide_pin(n, k, tile)
        if entry is not None:
            return entry
    return None


def push(table: PinTable) -> contextvars.Token[_Scope]:
    """Make ``table`` the innermost table of this context; give the token to :func:`pop`."""
    scope = _scope.get()
    return _scope.set(_Scope((table, *scope.tables), scope.include_process))


def pop(token: contextvars.Token[_Scope]) -> None:
    _scope.reset(token)


@contextmanager
def isolated(*tables: PinTable) -> Iterator[None]:
    """Only ``tables`` are active inside (no outer context, no process tables): for self-checks."""
    token = _scope.set(_Scope(tuple(tables), include_process=False))
    try:
        yield
    finally:
        _scope.reset(token)


def add_process_table(table: PinTable) -> None:
    """Activate ``table`` in every thread and context, behind any ``pinned_tactics()`` block."""
    global _process_tables, _process_version
    with _process_lock:
        if table not in _process_tables:
            _process_tables = (*_process_tables, table)
            _process_version += 1


def remove_process_table(table: PinTable) -> None:
    global _process_tables, _process_version
    with _process_lock:
        remaining = tuple(t for t in _process_tables if t is not table)
        if remaining != _process_tables:
            _process_tables = remaining
            _process_version += 1


def suspend(reason: str) -> None:
    """Turn pins off in every thread and context until :func:`resume`: open blocks' tables stop
    counting, and new ``pinned_tactics()`` blocks and ``fi_patches.auto`` pin nothing. The rank
    guard uses this so that every rank ends with the same (stock) candidate lists."""
    global _suspended
    _suspended = reason


def resume() -> None:
    global _suspended
    _suspended = None


def suspended() -> str | None:
    """Why pins are suspended, or None."""
    return _suspended
