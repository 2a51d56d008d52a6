"""The SGLang plugin's behavioural self-check, run by the compat layer after the probes pass:
the plugin is what SGLang will load, and SGLang's tuning step still sets FlashInfer's tune group
through the name fi_patches' rank guard wraps."""

from __future__ import annotations

from fi_patches.compat.target import Device
from fi_patches.host_plugin import entry_point_problem
from fi_patches.internals import sglang as upstream


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
