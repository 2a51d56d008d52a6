"""The default pin table: ``FI_PATCHES_PINS`` (a path), else what ``register_pins`` set, else
an empty table."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from fi_patches import _env
from fi_patches import _words as words
from fi_patches.compat.evaluate import on_refresh
from fi_patches.pins.errors import PinTableError
from fi_patches.pins.generation import bump
from fi_patches.pins.table import PinTable

if TYPE_CHECKING:
    from fi_patches.compat.evaluate import FeatureStatus

ENV = _env.PINS.name

_lock = threading.Lock()
_registered: PinTable | None = None
_file_cache: dict[str, PinTable] = {}


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
        cached = _file_cache.get(key)
    if cached is None:
        cached = PinTable.from_file(path)
        with _lock:
            _file_cache[key] = cached
    return cached


@on_refresh
def forget_loaded_files() -> None:
    """Read pin files again on next use."""
    with _lock:
        _file_cache.clear()


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
    from fi_patches.features import feature as declared

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
