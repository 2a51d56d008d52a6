"""Which pin tables are active: a context-local stack (``pinned_tactics()`` blocks, innermost
first) over process-wide tables (``fi_patches.auto``). One installed wrapper reads it, so
entering and leaving never patches or unpatches anything per thread.

Each scope keeps a merged index of its tables (:mod:`fi_patches.pinning.index`) and a memo for
the routers of :mod:`fi_patches.mxfp8`, which dies with the scope. A runner's wrapper reads its
context first (a context where nothing pins gets the stock list at once), then tests the call
against the probes of every table held anywhere (:func:`probe_cell`): most calls fail it and
get the stock list without a look at the scope's index.

Leaving a block removes exactly that block's table, by identity, whatever order blocks are
left in (generators closed out of order, tasks abandoned and finalized elsewhere): :func:`pop`
takes the block out of every scope that holds it, in this context and in any task or copied
context that inherited it while it was open. It never restores an earlier state
(``ContextVar.reset`` would bring back blocks left since).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from fi_patches import _env
from fi_patches._logging import get_logger, log_once
from fi_patches.compat.target import current_device
from fi_patches.pinning.index import NARROW, Memo, PinIndex, Probe, combine, merge
from fi_patches.pins.reading import PinTableError
from fi_patches.pins.table import (
    GENERATION,
    REFRESHED,
    Cache,
    PinTable,
    as_table,
    bump,
    default_pins,
    lookup_wide,
    registered_pins,
)

logger = get_logger(__name__)


class Block:
    """One open ``pinned_tactics()`` block (what :func:`push` returns and :func:`pop` takes)."""

    __slots__ = ("__weakref__", "is_open", "mode", "scopes", "table")

    def __init__(self, table: PinTable, mode: str = NARROW) -> None:
        self.table = table
        self.mode = mode
        self.is_open = True
        self.scopes: weakref.WeakSet[_Scope] = weakref.WeakSet()


_open_blocks: weakref.WeakSet[Block] = weakref.WeakSet()
"""Every block pushed and not yet left, for :func:`leave_all`."""


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
        "rows",
        "rows_version",
        "tables",
    )

    def __init__(self, blocks: tuple[Block, ...], include_process: bool = True) -> None:
        self.include_process = include_process
        self.rows = Memo()
        """The memo of :meth:`memo` (a hot path may read it directly while ``rows_version`` is
        the pin state's generation)."""
        self.rows_version = -1
        self._use(blocks)

    def _use(self, blocks: tuple[Block, ...]) -> None:
        self.blocks = blocks
        self.tables: tuple[PinTable, ...] = tuple(b.table for b in blocks)  # innermost first
        pairs = tuple((b.table, b.mode) for b in blocks)
        self.index: PinIndex | None = merge(pairs) if blocks else None
        self._merged: PinIndex | None = None
        self._merged_version = -1

    def with_process(self) -> PinIndex | None:
        """The index over this scope's tables and then the process-wide ones."""
        if not self.include_process or not _process_tables:
            return self.index
        version = GENERATION[0]  # read once: a pop may bump it while this merges
        if self._merged_version != version:
            pairs = tuple((b.table, b.mode) for b in self.blocks)
            self._merged = merge(pairs + tuple((t, NARROW) for t in _process_tables))
            self._merged_version = version
        return self._merged

    def memo(self) -> Memo:
        """This scope's memo for the pin state's current generation (routers cache what they
        chose here; it goes with the scope, and is emptied when the generation moves on)."""
        version = GENERATION[0]
        if self.rows_version != version:
            self.rows = Memo()
            self.rows_version = version
        return self.rows


_EMPTY = _Scope(())
_scope: contextvars.ContextVar[_Scope] = contextvars.ContextVar("fi_patches_pins", default=_EMPTY)
_process_lock = threading.Lock()
_process_tables: tuple[PinTable, ...] = ()
_suspended: str | None = None
PLAIN = [True]
"""``[True]`` while no process-wide table is active and pins are not suspended: a scope's own
``index`` is then the one in force (the wrappers read this flag, not the two globals)."""
CONTEXT = object()
"""What :data:`SERVING` holds while some block is open somewhere: the context decides."""
SERVING: list[Any] = [None]
"""Where a serving lookup finds the pins in force, in one read: None while nothing pins
anywhere (or pins are suspended), the process-wide tables' index while they are all that pins
(no block open in any context: every context sees that index), else :data:`CONTEXT` (read the
context's scope). Set under the lock whenever the pin state changes, so the next call sees
tables added, blocks entered or left, ``disable()``, suspension and resumption."""
_isolated = [0]
"""How many :func:`isolated` scopes are open."""
_held: dict[int, list[Any]] = {}
"""``id(table)`` -> ``[table, holders]`` for every table some scope may consult: open blocks,
process-wide tables and :func:`isolated` blocks."""
_cells: dict[str, dict[int, Probe]] = {}
"""Runner class -> its probes: per input-list length, one test that every call any held table
pins or silences passes (see :func:`probe_cell`)."""


def probe_cell(name: str) -> dict[int, Probe]:
    """The probes a wrapper of runner class ``name`` reads on every call in a context with pins:
    a call failing its probe has no pin in any scope, so the wrapper offers the stock list
    without a look at the scope's index. The dict is updated in place, key by key (a reader
    sees each length's probe as it was or as it is): a table's probes are in it before the
    table becomes visible to any scope, and stay until it has left every scope."""
    with _process_lock:
        cell = _cells.get(name)
        if cell is None:
            cell = _cells[name] = dict(_union().get(name, {}))
        return cell


def _union() -> dict[str, dict[int, Probe]]:
    indexes = [merge(((table, NARROW),)) for table, _ in _held.values()]
    if len(indexes) == 1:
        return indexes[0].probes
    tests: dict[str, dict[int, list[Probe]]] = {}
    for index in indexes:
        for name, lengths in index.probes.items():
            for length, probe in lengths.items():
                tests.setdefault(name, {}).setdefault(length, []).append(probe)
    return {
        name: {length: combine(found) for length, found in lengths.items()}
        for name, lengths in tests.items()
    }


def _hold(table: PinTable) -> None:
    held = _held.get(id(table))
    if held is not None:
        held[1] += 1
        return
    _held[id(table)] = [table, 1]
    try:
        _refresh()
    except BaseException:
        del _held[id(table)]
        raise


def _drop(table: PinTable) -> None:
    held = _held.get(id(table))
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _held[id(table)]
        _refresh()


def _replain() -> None:
    PLAIN[0] = not _process_tables and _suspended is None
    _reserve()


def _reserve() -> None:
    """Recompute :data:`SERVING` (under the lock)."""
    if _suspended is not None:
        SERVING[0] = None
    elif _open_blocks or _isolated[0]:
        SERVING[0] = CONTEXT
    elif _process_tables:
        SERVING[0] = merge(tuple((t, NARROW) for t in _process_tables))
    else:
        SERVING[0] = None


def _refresh() -> None:
    union = _union()
    for name, cell in _cells.items():
        probes = union.get(name, {})
        cell.update(probes)
        for length in [n for n in cell if n not in probes]:
            del cell[length]


def current_index() -> PinIndex | None:
    """The merged index of the pins active here, or None when there are none or pins are
    suspended (fast path)."""
    if _suspended is not None:
        return None
    here = _scope.get()
    if _process_tables and here.include_process:
        return here.with_process()
    return here.index


scope: Callable[[], _Scope] = _scope.get
"""This context's scope (its blocks, merged index and memo), read in one C call: the accessor
the wrappers' hot paths bind. ``scope().index is None and PLAIN[0]``: nothing pins in this
context (no block here, no process-wide table, pins not suspended), whatever other threads
and contexts hold."""


def opened_tables() -> tuple[PinTable, ...]:
    """The tables opened here, in priority order: this context's blocks (innermost first), then
    the process-wide tables; none while pins are suspended. Not the tables in force, which add
    the default table (:func:`tables_in_force`); what a test checks is empty after every block
    is left, and what the rank fingerprint shows beside the default table."""
    if _suspended is not None:
        return ()
    here = _scope.get()
    if here.include_process and _process_tables:
        return here.tables + _process_tables
    return here.tables


def push(table: PinTable, mode: str = NARROW) -> Block:
    """Make ``table`` the innermost table of this context; give the block to :func:`pop`.
    ``mode="preseed"``: the tuner-cache wrapper answers its keys itself."""
    block = Block(table, mode)
    with _process_lock:
        current = _scope.get()
        inner = _Scope((block, *current.blocks), current.include_process)
        _hold(table)
        for held in inner.blocks:
            held.scopes.add(inner)
        _open_blocks.add(block)
        SERVING[0] = CONTEXT
        bump()  # a scope made now must not meet a memo row of one that had its address
    _scope.set(inner)
    return block


def pop(block: Block) -> None:
    """Leave ``block``: its table stops being active everywhere, whatever blocks were entered
    or left since and whichever context this runs in. Leaving a block twice does nothing."""
    with _process_lock:
        if not block.is_open:
            return
        _leave(block)
        _reserve()
        bump()


def _leave(block: Block) -> None:
    block.is_open = False
    _open_blocks.discard(block)
    for holder in list(block.scopes):
        holder._use(tuple(b for b in holder.blocks if b is not block))
    block.scopes.clear()
    _drop(block.table)


def leave_all() -> int:
    """Leave every open block now, in every context (``fi_patches.disable()``): their tables
    stop counting and their own exit then does nothing. Returns how many were open."""
    with _process_lock:
        blocks = [b for b in list(_open_blocks) if b.is_open]
        for block in blocks:
            _leave(block)
        _reserve()
        bump()
    return len(blocks)


@contextmanager
def isolated(*tables: PinTable, mode: str = NARROW) -> Iterator[None]:
    """Only ``tables`` are active inside (no outer context, no process tables): for self-checks
    and for validating against FlashInfer's stock lists. Synchronous use only."""
    with _process_lock:
        scope = _Scope(tuple(Block(t, mode) for t in tables), include_process=False)
        for done, table in enumerate(tables):
            try:
                _hold(table)
            except BaseException:
                for held in tables[:done]:
                    _drop(held)
                raise
        _isolated[0] += 1
        SERVING[0] = CONTEXT
    token = _scope.set(scope)
    try:
        yield
    finally:
        _scope.reset(token)
        with _process_lock:
            _isolated[0] -= 1
            for table in tables:
                _drop(table)
            _reserve()


def add_process_table(table: PinTable) -> None:
    """Activate ``table`` in every thread and context, behind any ``pinned_tactics()`` block."""
    global _process_tables
    with _process_lock:
        if table not in _process_tables:
            _process_tables = (*_process_tables, table)
            _hold(table)
            _replain()
            bump()


def remove_process_table(table: PinTable) -> None:
    global _process_tables
    with _process_lock:
        remaining = tuple(t for t in _process_tables if t is not table)
        if remaining != _process_tables:
            _process_tables = remaining
            _drop(table)
            _replain()
            bump()


def suspend(reason: str) -> None:
    """Turn pins off in every thread and context until :func:`resume`: open blocks' tables stop
    counting, and new ``pinned_tactics()`` blocks and ``fi_patches.auto`` pin nothing. The rank
    guard uses this so that every rank ends with the same (stock) candidate lists."""
    global _suspended
    with _process_lock:
        _suspended = reason
        _replain()
        bump()  # what callers cached on the tables in force no longer holds


def resume() -> None:
    global _suspended
    with _process_lock:
        if _suspended is not None:
            _suspended = None
            _replain()
            bump()


def suspended() -> str | None:
    """Why pins are suspended, or None."""
    return _suspended


# The tables in force -------------------------------------------------------------------------

TableLike = PinTable | str | os.PathLike[str] | Mapping[str, object]


_memo: Cache[tuple[Any, ...], tuple[PinTable, ...]] = Cache(REFRESHED)
_MEMO_MAX = 1024
"""Rows of :data:`_memo` kept; past that it starts again (keys hold the tables in force)."""
_mappings: Cache[str, PinTable] = Cache(REFRESHED)


def pins_key(pins: object) -> object:
    """A hashable stand-in for a ``pins=`` argument: a table or path is itself; equal mappings
    share one key (their canonical JSON text)."""
    if pins is None or isinstance(pins, (PinTable, str, os.PathLike)):
        return pins
    if isinstance(pins, Mapping):
        return ("mapping", json.dumps(pins, sort_keys=True, default=repr))
    return ("object", id(pins))


def _as_table(pins: TableLike) -> PinTable:
    """``as_table``, with a mapping validated once per content."""
    if isinstance(pins, Mapping):
        key = str(pins_key(pins))
        mappings = _mappings.fresh()
        found = mappings.get(key)
        if found is None:
            if len(mappings) >= 64:
                mappings.clear()
            found = mappings[key] = as_table(pins)
        return found
    return as_table(pins)


def tables_in_force(pins: TableLike | None = None) -> tuple[PinTable, ...]:
    """The tables in force here, in priority order: ``pins`` alone when given; else this
    context's ``pinned_tactics()`` blocks (innermost first), then the process-wide tables
    (``fi_patches.auto``), then the default table (``FI_PATCHES_PINS``, else ``register_pins``).
    A given or default table chosen on another device is dropped (logged once), and so is a bad
    default table; none at all while pins are suspended. This is the one meaning of "the tables
    in force" (the routers, ``pinned_mm`` and the wide tile's tactics ask it); the engine's
    wrappers read the same blocks and process tables through the scope's index, and meet the
    default table once a block activates it.

    Memoized on what it depends on (the pins given, the opened tables, ``FI_PATCHES_PINS``, the
    registered table, the suspension), as hot paths ask on every call, until
    ``fi_patches.refresh()``."""
    key = (
        pins_key(pins),
        opened_tables(),
        _env.get(_env.PINS),
        registered_pins(),
        suspended(),
    )
    memo = _memo.fresh()
    found = memo.get(key)
    if found is None:
        found = _tables_in_force(pins)
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[key] = found
    return found


def _vetted(table: PinTable) -> bool:
    """Whether ``table`` was chosen on this device and release (logs once why not)."""
    skip = table.skip_reason(current_device().arch)
    if skip is not None:
        log_once(logger, logging.WARNING, f"skip:{skip}", "fi_patches skips a pin table: %s", skip)
    return skip is None


def _tables_in_force(pins: TableLike | None) -> tuple[PinTable, ...]:
    if suspended() is not None:
        return ()  # pins are off in this process (the rank guard's "disable"), given ones too
    if pins is not None:
        explicit = _as_table(pins)
        return (explicit,) if _vetted(explicit) else ()
    # Tables active here were vetted when pushed (pinned_tactics, fi_patches.auto).
    tables = opened_tables()
    try:
        default = default_pins()
    except PinTableError as exc:
        log_once(
            logger,
            logging.ERROR,
            f"badpins:{exc}",
            "fi_patches ignores its default pins: %s",
            exc.one_line(),
        )
        return tables
    if default and default not in tables and _vetted(default):
        tables = (*tables, default)
    return tables


def wide_pin(n: int, k: int, tile: int, pins: TableLike | None = None) -> Any:
    """The ``[[wide]]`` entry for weight ``(n, k)`` at activation tile ``tile``, or None."""
    return lookup_wide(tables_in_force(pins), n, k, tile)
