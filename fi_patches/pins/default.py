"""The pin state this process holds below the engine: the default table (``FI_PATCHES_PINS``, a
path, else what ``register_pins`` set, else an empty table), the pin files read so far, and the
one way every cache of pin state is invalidated.

That way is a generation counter, read when a cache is used: :data:`GENERATION` moves on
whenever the tables that could serve a call may have changed, and :data:`REFRESHED` (which moves
:data:`GENERATION` on too) only at ``fi_patches.refresh()``, for what holds until the installed
FlashInfer, the device or a pin file is read again (files read, tables checked, what runners
offer). A cache is a :class:`Cache` or, keyed weakly on a table or a FlashInfer class so as not
to keep it alive, a :class:`WeakCache`; either empties itself on first use after its counter
moved on, and hot paths compare ``GENERATION[0]`` themselves. ``fi_patches.refresh()`` reaches
the counters through the one hook registered here."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fi_patches import _env
from fi_patches import _text as words
from fi_patches.compat.evaluate import on_refresh
from fi_patches.pins.reading import PinTableError
from fi_patches.pins.table import PinTable

if TYPE_CHECKING:
    from fi_patches.compat.evaluate import FeatureStatus

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
