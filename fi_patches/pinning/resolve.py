"""Which pin serves a call: an explicit table, else the tables active here (``pinned_tactics()``
blocks and ``fi_patches.auto``), else the default table."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from fi_patches import _env
from fi_patches._logging import get_logger, log_once
from fi_patches.compat.evaluate import on_refresh
from fi_patches.compat.target import current_device
from fi_patches.pinning import stack
from fi_patches.pins.default import as_table, default_pins, registered_pins
from fi_patches.pins.errors import PinTableError
from fi_patches.pins.generation import bump
from fi_patches.pins.table import PinTable

logger = get_logger(__name__)

TableLike = PinTable | str | os.PathLike[str] | Mapping[str, object]


_memo: dict[tuple[Any, ...], tuple[PinTable, ...]] = {}
_MEMO_MAX = 1024
"""Rows of :data:`_memo` kept; past that it starts again (keys hold the tables in force)."""
_mappings: dict[str, PinTable] = {}


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
        found = _mappings.get(key)
        if found is None:
            if len(_mappings) >= 64:
                _mappings.clear()
            found = _mappings[key] = as_table(pins)
        return found
    return as_table(pins)


def candidate_tables(pins: TableLike | None) -> tuple[PinTable, ...]:
    """The tables to consult, in priority order, dropping (and logging once) a table chosen on
    another device, and a bad default table; none at all while pins are suspended. Memoized on
    what they depend on (the pins given, the active tables, ``FI_PATCHES_PINS``, the registered
    table, the suspension), as hot paths ask on every call; ``fi_patches.refresh()`` forgets
    it."""
    key = (
        pins_key(pins),
        stack.active_tables(),
        _env.get(_env.PINS),
        registered_pins(),
        stack.suspended(),
    )
    found = _memo.get(key)
    if found is None:
        found = _candidate_tables(pins)
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        _memo[key] = found
    return found


@on_refresh
def forget() -> None:
    _memo.clear()
    _mappings.clear()
    bump()


def _vetted(table: PinTable) -> bool:
    """Whether ``table`` was chosen on this device and release (logs once why not)."""
    skip = table.skip_reason(current_device().arch)
    if skip is not None:
        log_once(logger, logging.WARNING, f"skip:{skip}", "fi_patches skips a pin table: %s", skip)
    return skip is None


def _candidate_tables(pins: TableLike | None) -> tuple[PinTable, ...]:
    if stack.suspended() is not None:
        return ()  # pins are off in this process (the rank guard's "disable"), given ones too
    if pins is not None:
        explicit = _as_table(pins)
        return (explicit,) if _vetted(explicit) else ()
    # Tables active here were vetted when pushed (pinned_tactics, fi_patches.auto).
    tables = stack.active_tables()
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
    return stack.lookup_wide(candidate_tables(pins), n, k, tile)
