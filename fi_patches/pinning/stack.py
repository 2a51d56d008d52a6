"""Which pin tables are active: a context-local stack (``pinned_tactics()`` blocks, innermost
first) over process-wide tables (``fi_patches.auto``). One installed wrapper reads it, so
entering and leaving never patches or unpatches anything per thread.

Each scope keeps a merged index, ``section -> (n, k) -> entries in priority order`` (and the
same keyed ``(k, n)``, the orientation of ``mm_mxfp8``'s column-major weight, so the hot path
looks a tensor's ``shape`` up as it is), costing one context-variable read and two dict lookups.

Leaving a block removes exactly that block's table, by identity, whatever order blocks are
left in (generators closed out of order, tasks abandoned and finalized elsewhere): :func:`pop`
takes the block out of every scope that holds it, in this context and in any task or copied
context that inherited it while it was open. It never restores an earlier state
(``ContextVar.reset`` would bring back blocks left since).
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fi_patches.pins.generation import GENERATION, bump
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


class Block:
    """One open ``pinned_tactics()`` block (what :func:`push` returns and :func:`pop` takes)."""

    __slots__ = ("is_open", "scopes", "table")

    def __init__(self, table: PinTable) -> None:
        self.table = table
        self.is_open = True
        self.scopes: weakref.WeakSet[_Scope] = weakref.WeakSet()


class _Scope:
    """The blocks active in a context, innermost first, with their merged index. Immutable
    except that :func:`pop` takes a left block out of every scope holding it."""

    __slots__ = (
        "__weakref__",
        "_merged",
        "_merged_version",
        "blocks",
        "include_process",
        "index",
        "tables",
    )

    def __init__(self, blocks: tuple[Block, ...], include_process: bool = True) -> None:
        self.include_process = include_process
        self._use(blocks)

    def _use(self, blocks: tuple[Block, ...]) -> None:
        self.blocks = blocks
        self.tables: tuple[PinTable, ...] = tuple(b.table for b in blocks)  # innermost first
        self.index: Index | None = _merge(self.tables) if blocks else None
        self._merged: Index | None = None
        self._merged_version = -1

    def with_process(self) -> Index | None:
        """The index over this scope's tables and then the process-wide ones."""
        if not self.include_process or not _process_tables:
            return self.index
        version = GENERATION[0]  # read once: a pop may bump it while this merges
        if self._merged_version != version:
            self._merged = _merge(self.tables + _process_tables)
            self._merged_version = version
        return self._merged


_EMPTY = _Scope(())
_scope: contextvars.ContextVar[_Scope] = contextvars.ContextVar("fi_patches_pins", default=_EMPTY)
_process_lock = threading.Lock()
_process_tables: tuple[PinTable, ...] = ()
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


def push(table: PinTable) -> Block:
    """Make ``table`` the innermost table of this context; give the block to :func:`pop`."""
    block = Block(table)
    with _process_lock:
        scope = _scope.get()
        inner = _Scope((block, *scope.blocks), scope.include_process)
        for held in inner.blocks:
            held.scopes.add(inner)
    _scope.set(inner)
    return block


def pop(block: Block) -> None:
    """Leave ``block``: its table stops being active everywhere, whatever blocks were entered
    or left since and whichever context this runs in. Leaving a block twice does nothing."""
    with _process_lock:
        if not block.is_open:
            return
        block.is_open = False
        for scope in list(block.scopes):
            scope._use(tuple(b for b in scope.blocks if b is not block))
        block.scopes.clear()
        bump()


@contextmanager
def isolated(*tables: PinTable) -> Iterator[None]:
    """Only ``tables`` are active inside (no outer context, no process tables): for self-checks
    and for validating against FlashInfer's stock lists. Synchronous use only."""
    token = _scope.set(_Scope(tuple(Block(t) for t in tables), include_process=False))
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
            bump()


def remove_process_table(table: PinTable) -> None:
    global _process_tables
    with _process_lock:
        remaining = tuple(t for t in _process_tables if t is not table)
        if remaining != _process_tables:
            _process_tables = remaining
            bump()


def suspend(reason: str) -> None:
    """Turn pins off in every thread and context until :func:`resume`: open blocks' tables stop
    counting, and new ``pinned_tactics()`` blocks and ``fi_patches.auto`` pin nothing. The rank
    guard uses this so that every rank ends with the same (stock) candidate lists."""
    global _suspended
    with _process_lock:
        _suspended = reason
        bump()  # what callers cached on the tables in force no longer holds


def resume() -> None:
    global _suspended
    with _process_lock:
        if _suspended is not None:
            _suspended = None
            bump()


def suspended() -> str | None:
    """Why pins are suspended, or None."""
    return _suspended
