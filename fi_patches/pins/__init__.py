"""Pin tables: which tactic each runner uses per weight shape and row range."""

from fi_patches.pins.default import default_pins, register_pins
from fi_patches.pins.errors import PinProblem, PinTableError
from fi_patches.pins.schema import LowLatencyPin, PinMeta
from fi_patches.pins.table import PinTable

__all__ = [
    "LowLatencyPin",
    "PinMeta",
    "PinProblem",
    "PinTable",
    "PinTableError",
    "default_pins",
    "register_pins",
]
