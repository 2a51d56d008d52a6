"""fi_patches: version-gated patches and shims for FlashInfer.

``import fi_patches`` imports neither torch nor FlashInfer; the names below load on first use.
"""

from __future__ import annotations

from fi_patches._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: the start-up hook imports this package at every start

_EXPORTS = {
    "status": "fi_patches.overview",
    "refresh": "fi_patches.overview",
    "FeatureStatus": "fi_patches.overview",
    "InternalError": "fi_patches.internals",
    "pinned_tactics": "fi_patches.pinning.context",
    "PinTable": "fi_patches.pins.table",
    "PinTableError": "fi_patches.pins.reading",
    "PinProblem": "fi_patches.pins.reading",
    "register_pins": "fi_patches.pins.table",
    "default_pins": "fi_patches.pins.table",
    "enable": "fi_patches.activation",
    "disable": "fi_patches.activation",
    "rank_guard": "fi_patches.ranks.guard",
    "RankMismatchError": "fi_patches.ranks.guard",
    "__version__": "fi_patches._version",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fi_patches._version import __version__ as __version__
    from fi_patches.activation import disable as disable
    from fi_patches.activation import enable as enable
    from fi_patches.internals import InternalError as InternalError
    from fi_patches.overview import FeatureStatus as FeatureStatus
    from fi_patches.overview import refresh as refresh
    from fi_patches.overview import status as status
    from fi_patches.pinning.context import pinned_tactics as pinned_tactics
    from fi_patches.pins.reading import PinProblem as PinProblem
    from fi_patches.pins.reading import PinTableError as PinTableError
    from fi_patches.pins.table import PinTable as PinTable
    from fi_patches.pins.table import default_pins as default_pins
    from fi_patches.pins.table import register_pins as register_pins
    from fi_patches.ranks.guard import RankMismatchError as RankMismatchError
    from fi_patches.ranks.guard import rank_guard as rank_guard


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
