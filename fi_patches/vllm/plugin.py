"""vLLM's general plugin: the entry point ``fi_patches`` in the group ``vllm.general_plugins``,
which vLLM's ``load_general_plugins()`` calls in every process it starts (API server, engine
core, each worker). ``VLLM_PLUGINS`` naming other plugins only keeps vLLM from calling it.

:func:`register` activates fi_patches as ``fi_patches.auto`` does (the default pin table,
``FI_PATCHES_PINS``, applied when FlashInfer is imported) and, with ``FI_PATCHES_VLLM_ROUTE=1``,
arms the routing of vLLM's cute-dsl MXFP8 linears. It is off unless the user opts in (see
:mod:`fi_patches.vllm.settings`), idempotent, never raises into vLLM, asks for no device and
imports no FlashInfer, and logs one line saying what it did.
"""

from __future__ import annotations

import logging

from fi_patches._logging import get_logger
from fi_patches.host_plugin import Entry, activate_pins
from fi_patches.internals import vllm as upstream

logger = get_logger(__name__)

PREFIX = "fi_patches vLLM plugin"


def _activate() -> tuple[int, str]:
    """Do what the settings ask; the level and text of the one line to log."""
    from fi_patches.vllm.settings import read

    settings = read()
    if not settings.active:
        return logging.DEBUG, f"off ({settings.why})"
    from fi_patches.features import VLLM_PLUGIN
    from fi_patches.vllm.self_check import plugin_self_check

    level, text, active = activate_pins(
        VLLM_PLUGIN, upstream.VLLM, plugin_self_check, "vLLM", settings.why
    )
    if active and settings.route:
        from fi_patches.vllm import route

        text = f"{text}; {route.arm()}"
    return level, text


_ENTRY = Entry(PREFIX, "vLLM", upstream.LOGGER, _activate, logger)


def register() -> None:
    """The plugin's entry point. Never raises; a second call in a process does nothing."""
    _ENTRY.run()


def outcome() -> str | None:
    """What :func:`register` did in this process, or None before it ran."""
    return _ENTRY.outcome
