"""SGLang's general plugin: the entry point ``fi_patches`` in the group ``sglang.srt.plugins``,
which SGLang's ``load_plugins()`` calls in every process it starts (the engine, each scheduler
and worker, the detokenizer, the DP controller). ``SGLANG_PLUGINS`` naming other plugins keeps
SGLang from calling it.

:func:`register` activates fi_patches as ``fi_patches.auto`` does: the default pin table
(``FI_PATCHES_PINS``) applied when FlashInfer is imported, and the automatic rank guard before
FlashInfer's ``set_autotune_process_group``, which SGLang's tuning step calls. It installs only
fi_patches' own FlashInfer patches and registers no hook on SGLang's modules. It is off unless
the user opts in (see :func:`fi_patches._env.sglang_settings`), idempotent, never raises into
SGLang, asks for no device and imports no FlashInfer, and logs one line saying what it did.

The module also holds the plugin's behavioural self-check (:func:`plugin_self_check`) and the
one sentence ``doctor`` prints about it (:func:`summary`).
"""

from __future__ import annotations

import importlib.metadata
import logging

from fi_patches import _env
from fi_patches._logging import get_logger
from fi_patches.activation import Entry, activate_pins, entry_point_problem
from fi_patches.compat.target import Device
from fi_patches.internals import sglang as upstream

logger = get_logger(__name__)

PREFIX = "fi_patches SGLang plugin"


def _activate() -> tuple[int, str]:
    """Do what the settings ask; the level and text of the one line to log."""
    settings = _env.sglang_settings()
    if not settings.active:
        return logging.DEBUG, f"off ({settings.why})"
    from fi_patches.compat.features import SGLANG_PLUGIN

    level, text, _ = activate_pins(
        SGLANG_PLUGIN, upstream.SGLANG, plugin_self_check, "SGLang", settings.why
    )
    return level, text


def plugin_self_check(device: Device) -> str | None:
    """SGLang reads the group fi_patches' entry point is in, that entry point is installed, and
    SGLang's tuning module (read from its source, not imported) calls the guarded setter."""
    group = upstream.plugins_group()
    if group != upstream.GENERAL_PLUGINS_GROUP:
        return (
            f"SGLang loads general plugins from {group!r}, not {upstream.GENERAL_PLUGINS_GROUP!r}"
        )
    problem = entry_point_problem(
        upstream.GENERAL_PLUGINS_GROUP, upstream.ENTRY_POINT_NAME, upstream.ENTRY_POINT_VALUE
    )
    if problem is not None:
        return problem
    source = upstream.autotune_source()
    if source is None:
        return f"SGLang has no {upstream.AUTOTUNE_MODULE} to guard"
    return upstream.tuning_site_problem(source)


def _registered() -> bool:
    points = importlib.metadata.entry_points(group=upstream.GENERAL_PLUGINS_GROUP)
    return any(
        ep.name == upstream.ENTRY_POINT_NAME and ep.value == upstream.ENTRY_POINT_VALUE
        for ep in points
    )


def _whitelisted() -> str | None:
    """Why ``SGLANG_PLUGINS`` keeps SGLang from calling the plugin, or None."""
    listed = _env.environ().get(upstream.PLUGINS_ENV, "")
    names = {x.strip() for x in listed.split(",") if x.strip()}
    if names and upstream.ENTRY_POINT_NAME not in names:
        return f"{upstream.PLUGINS_ENV}={listed!r} leaves it out"
    return None


def summary() -> str:
    """The one sentence ``doctor`` prints about the plugin: SGLang's version, whether the entry
    point is registered, and whether an SGLang process started now would activate it
    (``SGLang 0.5.23; entry point fi_patches registered in sglang.srt.plugins; ...``)."""

    try:
        version = importlib.metadata.version(upstream.SGLANG.distribution)
        installed = f"{upstream.SGLANG.label} {version}"
    except importlib.metadata.PackageNotFoundError:
        installed = f"{upstream.SGLANG.label} is not installed"
    state = "registered" if _registered() else "NOT registered (reinstall fi_patches)"
    point = f"entry point {upstream.ENTRY_POINT_NAME} {state} in {upstream.GENERAL_PLUGINS_GROUP}"
    settings = _env.sglang_settings()
    skipped = _whitelisted()
    if skipped:
        would = f"SGLang would not call it ({skipped})"
    elif settings.active:
        would = f"it would activate ({settings.why})"
    else:
        would = f"it would stay off ({settings.why})"
    return f"{installed}; {point}; {would}."


_ENTRY = Entry(PREFIX, "SGLang", upstream.LOGGER, _activate, logger)


def register() -> None:
    """The plugin's entry point. Never raises; a second call in a process does nothing."""
    _ENTRY.run()


def outcome() -> str | None:
    """What :func:`register` did in this process, or None before it ran."""
    return _ENTRY.outcome
