"""The environment variables of the SGLang plugin, read in this one place.

The plugin is off unless the user opts in: ``FI_PATCHES_PINS`` (a pin table to apply) or
``FI_PATCHES_SGLANG=1``. ``FI_PATCHES_SGLANG=0`` keeps it off whatever else is set.
"""

from __future__ import annotations

from collections.abc import Mapping

from fi_patches import _env
from fi_patches.vllm.settings import Settings

__all__ = ["Settings", "read"]

PINS_ENV = _env.PINS.name
SGLANG_ENV = _env.SGLANG.name


def read(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings in ``environ`` (``os.environ`` by default). A switch that is not a boolean
    counts as unset, with one warning (:func:`fi_patches._env.boolean`)."""
    env = _env.environ() if environ is None else environ
    on = _env.boolean(_env.SGLANG, env)
    if on is False:
        return Settings(False, False, f"{SGLANG_ENV}={env[SGLANG_ENV]} turns it off")
    if on:
        return Settings(True, False, f"{SGLANG_ENV}={env[SGLANG_ENV]}")
    if env.get(PINS_ENV):
        return Settings(True, False, f"{PINS_ENV} is set")
    return Settings(False, False, f"neither {PINS_ENV} nor {SGLANG_ENV}=1 is set")
