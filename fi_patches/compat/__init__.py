"""The compat layer: what the patched packages and the device are, and whether each feature is
enabled (with the reason when it is not). Importing this package imports none of its modules
(the names below load on first use), so ``compat.target``, which the lockfile format reads,
imports no evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fi_patches._lazy import lazy_exports

_EXPORTS = {
    "FeatureStatus": "fi_patches.compat.features",
    "refresh": "fi_patches.compat.features",
    "status_of": "fi_patches.compat.features",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fi_patches.compat.features import FeatureStatus as FeatureStatus
    from fi_patches.compat.features import refresh as refresh
    from fi_patches.compat.features import status_of as status_of

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
