"""Same tactics on every rank: :func:`rank_guard` compares what each rank of a process group
runs (versions, device, feature states, pin tables, ``FI_PATCHES_*`` settings) before the ranks
tune together, and the tuning divergence detector compares their candidate lists while they
do. Importing this package imports neither torch nor FlashInfer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fi_patches._lazy import lazy_exports

_EXPORTS = {
    "rank_guard": "fi_patches.ranks.guard",
    "RankMismatchError": "fi_patches.ranks.guard",
    "Fingerprint": "fi_patches.ranks.guard",
    "local_fingerprint": "fi_patches.ranks.guard",
    "TacticDivergenceError": "fi_patches.ranks.guard",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fi_patches.ranks.guard import Fingerprint as Fingerprint
    from fi_patches.ranks.guard import RankMismatchError as RankMismatchError
    from fi_patches.ranks.guard import TacticDivergenceError as TacticDivergenceError
    from fi_patches.ranks.guard import local_fingerprint as local_fingerprint
    from fi_patches.ranks.guard import rank_guard as rank_guard

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
