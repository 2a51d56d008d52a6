"""The automatic rank guard: while fi_patches is active (``fi_patches.auto`` requested, or a
``pinned_tactics()`` block open), FlashInfer's ``set_autotune_process_group`` first runs
:func:`~fi_patches.ranks.guard.rank_guard` on the group it is given, in the mode
``FI_PATCHES_RANK_GUARD`` names. With ``FI_PATCHES_RANK_GUARD_TUNING=1`` the same installation
also carries the tuning divergence detector (:mod:`fi_patches.ranks.tuning`).

The setter wrapper never raises because of fi_patches, except :class:`RankMismatchError` in
``raise`` mode, which is its purpose. It is a reversible patch, reference-counted like the
pinning wrappers, so the last holder to leave restores FlashInfer's own function.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.internals import tune_group
from fi_patches.patching import AttributePatch, PatchSet
from fi_patches.patching.patch import proxied
from fi_patches.pinning.installation import Hold, Installation
from fi_patches.ranks import settings

logger = get_logger(__name__)


def guard_before_tuning(group: Any) -> None:
    """Run the guard on ``group`` in the configured mode; only a mismatch in ``raise`` mode
    escapes, anything else is logged and FlashInfer goes on."""
    from fi_patches.ranks.guard import DEFAULT_TIMEOUT, RankMismatchError, run_guard

    mode = settings.automatic_mode()
    if mode == "off":
        return
    try:
        run_guard(group, mode, DEFAULT_TIMEOUT, tune_group.SET_GROUP)
    except RankMismatchError:
        if mode == "raise":
            raise
        logger.exception("fi_patches' rank guard raised in mode %r", mode)
    except Exception:
        log_once(
            logger,
            logging.WARNING,
            "automatic-guard-failed",
            "fi_patches' automatic rank guard could not run; FlashInfer tunes unguarded",
            exc_info=True,
        )


def _group(group: Any, *args: Any, **kwargs: Any) -> Any:
    """Binds a ``set_autotune_process_group`` call's group as FlashInfer's function names it."""
    return group


def _guard_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``set_autotune_process_group`` that runs the guard on the group first (wrapt's form)."""
    try:
        group = _group(*args, **kwargs)
    except TypeError:  # a call FlashInfer's own function rejects: it raises what it raises
        group = None
    if group is not None:
        guard_before_tuning(group)
    return wrapped(*args, **kwargs)


_guarded_setter = proxied(_guard_wrapper)
"""The setter's replacement: a ``wrapt.FunctionWrapper`` (a setter is no hot path), enabled
while the guard's installation holds it."""


def _build() -> PatchSet:
    reason = tune_group.first_failure(tune_group.GUARD_PROBES)
    if reason is not None:
        log_once(
            logger,
            logging.INFO,
            f"unavailable:{reason}",
            "fi_patches' automatic rank guard is off: %s",
            reason,
        )
        return PatchSet([])
    patches: list[Any] = [
        AttributePatch(owner, tune_group.SET_GROUP, _guarded_setter)
        for owner in tune_group.setter_owners()
    ]
    if settings.tuning_detector_requested():
        from fi_patches.ranks.tuning import detector_patches

        patches += detector_patches()
    return PatchSet(patches)


GUARD = Installation("rank_guard", _build)
"""Held by ``fi_patches.auto`` and by each open ``pinned_tactics()`` block."""


def arm() -> Hold | None:
    """Acquire the guard's installation (give the hold back to release it); None when there is
    no FlashInfer to guard, or (logged once) when it could not be applied, so pinning goes on
    without it."""
    if "flashinfer" not in sys.modules:
        from fi_patches.compat.evaluate import installed_flashinfer

        # Import FlashInfer before taking the installation's lock: its post-import hook
        # (fi_patches.auto) arms the guard too, and must not find the lock held.
        if not installed_flashinfer().importable:
            return None
    try:
        return GUARD.acquire()
    except Exception:
        log_once(
            logger,
            logging.WARNING,
            "arm-failed",
            "fi_patches could not install its automatic rank guard; pins apply without it",
            exc_info=True,
        )
        return None
