"""vLLM's general plugin: the entry point ``fi_patches`` in the group ``vllm.general_plugins``,
which vLLM's ``load_general_plugins()`` calls in every process it starts (API server, engine
core, each worker). ``VLLM_PLUGINS`` naming other plugins only keeps vLLM from calling it.

:func:`register` activates fi_patches as ``fi_patches.auto`` does (the default pin table,
``FI_PATCHES_PINS``, applied when FlashInfer is imported) and, with ``FI_PATCHES_VLLM_ROUTE=1``,
arms the routing of vLLM's cute-dsl MXFP8 linears. It is off unless the user opts in (see
:func:`fi_patches._env.vllm_settings`), idempotent, never raises into vLLM, asks for no device and
imports no FlashInfer, and logs one line saying what it did. :func:`plugin_self_check` is the
plugin feature's behavioural self-check.
"""

from __future__ import annotations

import logging

from fi_patches import _env
from fi_patches._logging import get_logger
from fi_patches.activation import Entry, activate_pins, entry_point_problem
from fi_patches.compat.target import Device
from fi_patches.internals import vllm as upstream

logger = get_logger(__name__)

PREFIX = "fi_patches vLLM plugin"


def _activate() -> tuple[int, str]:
    """Do what the settings ask; the level and text of the one line to log."""
    settings = _env.vllm_settings()
    if not settings.active:
        return logging.DEBUG, f"off ({settings.why})"
    from fi_patches.compat.features import VLLM_PLUGIN

    level, text, active = activate_pins(
        VLLM_PLUGIN, upstream.VLLM, plugin_self_check, "vLLM", settings.why
    )
    if active and settings.route:
        from fi_patches.vllm import route

        text = f"{text}; {route.arm()}"
    return level, text


def plugin_self_check(device: Device) -> str | None:
    """vLLM reads the group fi_patches' entry point is in, and that entry point is installed."""
    group = upstream.plugins_group()
    if group != upstream.GENERAL_PLUGINS_GROUP:
        return f"vLLM loads general plugins from {group!r}, not {upstream.GENERAL_PLUGINS_GROUP!r}"
    return entry_point_problem(
        upstream.GENERAL_PLUGINS_GROUP, upstream.ENTRY_POINT_NAME, upstream.ENTRY_POINT_VALUE
    )


_ENTRY = Entry(PREFIX, "vLLM", upstream.LOGGER, _activate, logger)


def register() -> None:
    """The plugin's entry point. Never raises; a second call in a process does nothing."""
    _ENTRY.run()


def outcome() -> str | None:
    """What :func:`register` did in this process, or None before it ran."""
    return _ENTRY.outcome
