"""The rank guard's environment settings, read here and nowhere else in this package."""

from __future__ import annotations

import logging
import os

from fi_patches._logging import get_logger, log_once

logger = get_logger(__name__)

GUARD_ENV = "FI_PATCHES_RANK_GUARD"
"""Mode of the automatic guard run before FlashInfer's ``set_autotune_process_group``."""

TUNING_ENV = "FI_PATCHES_RANK_GUARD_TUNING"
"""``1`` turns on the tuning divergence detector (read when the automatic guard installs)."""

PREFIX = "FI_PATCHES_"
"""Every variable with this prefix is part of a rank's fingerprint."""

MODES = ("raise", "disable", "warn")
"""What :func:`~fi_patches.ranks.guard.rank_guard` does when the ranks disagree."""

AUTOMATIC_MODES = (*MODES, "off")
DEFAULT_MODE = "raise"

_TRUE = ("1", "true", "yes", "on")


def automatic_mode() -> str:
    """The automatic guard's mode from ``FI_PATCHES_RANK_GUARD`` (default ``raise``); an
    unknown value logs one warning and keeps the default, the safe choice."""
    raw = os.environ.get(GUARD_ENV, "").strip().lower()
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
    return os.environ.get(TUNING_ENV, "").strip().lower() in _TRUE


def fi_patches_settings() -> dict[str, str]:
    """Every ``FI_PATCHES_*`` variable set in this process, by name."""
    return {name: value for name, value in sorted(os.environ.items()) if name.startswith(PREFIX)}
