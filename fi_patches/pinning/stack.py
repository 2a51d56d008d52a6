"""Which pin tables are active: a context-local stack (``pinned_tactics()`` blocks, innermost
first) over process-wide tables (``fi_patches.auto``). One installed wrapper reads it, so
entering and leaving never patches or unpatches anything per thread."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fi_patches.pins.table import PinTable


@dataclass(frozen=True)
class _Scope:
    tables: tuple[PinTable, ...]
    """Innermost first."""
    include_process: bool = True


_EMPTY = _Scope(())
_scope: contextvars.ContextVar[_Scope] = contextvars.ContextVar("fi_patches_pins", default=_EMPTY)
_process_lock = threading.Lock()
_process_tables: tuple[PinTable, ...] = ()


def active_tables() -> tuple[PinTable, ...]:
    """The tables consulted now, in priority order (empty on the fast path)."""
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
    global _process_tables
    with _process_lock:
        if table not in _process_tables:
            _process_tables = (*_process_tables, table)


def remove_process_table(table: PinTable) -> None:
    global _process_tables
    with _process_lock:
        _process_tables = tuple(t for t in _process_tables if t is not table)


def process_tables() -> tuple[PinTable, ...]:
    return _process_tables
