"""Pin tables: which tactic each runner uses per weight shape and row range.

Importing this package imports none of its modules (the names below load on first use), so
the lockfile format's modules (``keys``, ``table`` ...) import no more than they name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fi_patches._lazy import lazy_exports

_EXPORTS = {
    "LowLatencyPin": "fi_patches.pins.schema",
    "PinMeta": "fi_patches.pins.schema",
    "PinProblem": "fi_patches.pins.reading",
    "PinTable": "fi_patches.pins.table",
    "PinTableError": "fi_patches.pins.reading",
    "default_pins": "fi_patches.pins.table",
    "register_pins": "fi_patches.pins.table",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fi_patches.pins.reading import PinProblem as PinProblem
    from fi_patches.pins.reading import PinTableError as PinTableError
    from fi_patches.pins.schema import LowLatencyPin as LowLatencyPin
    from fi_patches.pins.schema import PinMeta as PinMeta
    from fi_patches.pins.table import PinTable as PinTable
    from fi_patches.pins.table import default_pins as default_pins
    from fi_patches.pins.table import register_pins as register_pins

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
