"""The rank guard's settings: its two variables (declared in :mod:`fi_patches._env`) and the
``FI_PATCHES_*`` settings every rank's fingerprint holds."""

from __future__ import annotations

import logging

from fi_patches import _env
from fi_patches._logging import get_logger, log_once

logger = get_logger(__name__)

GUARD_ENV = _env.RANK_GUARD.name
"""Mode of the automatic guard run before FlashInfer's ``set_autotune_process_group``."""

MODES = ("raise", "disable", "warn")
"""What :func:`~fi_patches.ranks.guard.rank_guard` does when the ranks disagree."""

AUTOMATIC_MODES = (*MODES, "off")
DEFAULT_MODE = "raise"


def automatic_mode() -> str:
    """The automatic guard's mode from ``FI_PATCHES_RANK_GUARD`` (default ``raise``); an
    unknown value logs one warning and keeps the default, the safe choice."""
    raw = (_env.get(_env.RANK_GUARD) or "").strip().lower()
    if not raw:
        return DEFAULT_MODE
    if raw in AUTOMATIC_MODES:
        return raw
    log_once(
        logger,
        logging.WARNING,
        f"mode:{raw}",
        "%s=%r is not one of %s; using %r",
        GUARD_ENV,
        raw,
        "|".join(AUTOMATIC_MODES),
        DEFAULT_MODE,
    )
    return DEFAULT_MODE


def tuning_detector_requested() -> bool:
    """Whether ``FI_PATCHES_RANK_GUARD_TUNING`` asks for the tuning divergence detector."""
    return _env.flag(_env.RANK_GUARD_TUNING)


def fi_patches_settings() -> dict[str, str]:
    """Every ``FI_PATCHES_*`` variable set in this process, by name."""
    return _env.settings()
