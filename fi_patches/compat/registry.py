"""Every feature fi_patches has, in the order ``doctor`` lists them."""

from __future__ import annotations

import importlib

from fi_patches.compat.feature import Feature

_DECLARATIONS = (
    "fi_patches.pinning.feature:FEATURE",
    "fi_patches.cute_dsl.feature:FEATURE",
    "fi_patches.wide.feature:FEATURE",
    "fi_patches.vllm.feature:PLUGIN",
    "fi_patches.vllm.feature:ROUTE",
)


def features() -> tuple[Feature, ...]:
    """The declared features (cheap: declarations import neither torch nor FlashInfer)."""
    found = []
    for path in _DECLARATIONS:
        module, _, name = path.partition(":")
        found.append(getattr(importlib.import_module(module), name))
    return tuple(found)


def feature(name: str) -> Feature:
    """The feature called ``name``; ``KeyError`` names the known ones otherwise."""
    for declared in features():
        if declared.name == name:
            return declared
    known = ", ".join(f.name for f in features())
    raise KeyError(f"no fi_patches feature {name!r} (known: {known})")
