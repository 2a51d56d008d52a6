"""SGLang's general plugin: the entry point ``fi_patches`` in the group ``sglang.srt.plugins``,
which SGLang's ``load_plugins()`` calls in every process it starts (the engine, each scheduler
and worker, the detokenizer, the DP controller). ``SGLANG_PLUGINS`` naming other plugins keeps
SGLang from calling it.

:func:`register` activates fi_patches as ``fi_patches.auto`` does: the default pin table
(``FI_PATCHES_PINS``) applied when FlashInfer is imported, and the automatic rank guard before
FlashInfer's ``set_autotune_process_group``, which SGLang's tuning step calls. It installs only
fi_patches' own FlashInfer patches and registers no hook on SGLang's modules. It is off unless
the user opts in (see :mod:`fi_patches.sglang.settings`), idempotent, never raises into SGLang,
asks for no device and imports no FlashInfer, and logs one line saying what it did.
"""

from __future__ import annotations

import logging

from fi_patches._logging import get_logger
from fi_patches.host_plugin import Entry, activate_pins
from fi_patches.internals import sglang as upstream

logger = get_logger(__name__)

PREFIX = "fi_patches SGLang plugin"


def _activate() -> tuple[int, str]:
    """Do what the settings ask; the level and text of the one line to log."""
    from fi_patches.sglang.settings import read

    settings = read()
    if not settings.active:
        return logging.DEBUG, f"off ({settings.why})"
    from fi_patches.features import SGLANG_PLUGIN
    from fi_patches.sglang.self_check import plugin_self_check

    level, text, _ = activate_pins(
        SGLANG_PLUGIN, upstream.SGLANG, plugin_self_check, "SGLang", settings.why
    )
    return level, text


_ENTRY = Entry(PREFIX, "SGLang", upstream.LOGGER, _activate, logger)


def register() -> None:
    """The plugin's entry point. Never raises; a second call in a process does nothing."""
    _ENTRY.run()


def outcome() -> str | None:
    """What :func:`register` did in this process, or None before it ran."""
    return _ENTRY.outcome
