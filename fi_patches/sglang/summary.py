"""The one sentence ``doctor`` prints about the SGLang plugin: SGLang's version, whether the
entry point is registered, and whether an SGLang process started now would activate it."""

from __future__ import annotations

import importlib.metadata

from fi_patches import _env
from fi_patches.internals import sglang as upstream


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
    """``SGLang 0.5.23; entry point fi_patches registered in sglang.srt.plugins; ...``."""
    from fi_patches.sglang.settings import read

    try:
        version = importlib.metadata.version(upstream.SGLANG.distribution)
        installed = f"{upstream.SGLANG.label} {version}"
    except importlib.metadata.PackageNotFoundError:
        installed = f"{upstream.SGLANG.label} is not installed"
    state = "registered" if _registered() else "NOT registered (reinstall fi_patches)"
    point = f"entry point {upstream.ENTRY_POINT_NAME} {state} in {upstream.GENERAL_PLUGINS_GROUP}"
    settings = read()
    skipped = _whitelisted()
    if skipped:
        would = f"SGLang would not call it ({skipped})"
    elif settings.active:
        would = f"it would activate ({settings.why})"
    else:
        would = f"it would stay off ({settings.why})"
    return f"{installed}; {point}; {would}."
