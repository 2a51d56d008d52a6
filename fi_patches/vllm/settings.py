"""The environment variables of the vLLM integration, read in this one place.

The plugin is off unless the user opts in: ``FI_PATCHES_PINS`` (a pin table to apply),
``FI_PATCHES_VLLM=1`` or ``FI_PATCHES_VLLM_ROUTE=1``. ``FI_PATCHES_VLLM=0`` keeps it off whatever
else is set. ``FI_PATCHES_VLLM_ROUTE=1`` also routes vLLM's cute-dsl MXFP8 linears.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fi_patches import _env

PINS_ENV = _env.PINS.name
VLLM_ENV = _env.VLLM.name
ROUTE_ENV = _env.VLLM_ROUTE.name


@dataclass(frozen=True)
class Settings:
    """What the user asked of the plugin, and which variable asked it."""

    active: bool
    route: bool
    why: str


def read(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings in ``environ`` (``os.environ`` by default). A switch that is not a boolean
    counts as unset, with one warning (:func:`fi_patches._env.boolean`)."""
    env = _env.environ() if environ is None else environ
    switch = _env.boolean(_env.VLLM, env)
    route = bool(_env.boolean(_env.VLLM_ROUTE, env))
    if switch is False:
        return Settings(False, False, f"{VLLM_ENV}={env[VLLM_ENV]} turns it off")
    if switch:
        return Settings(True, route, f"{VLLM_ENV}={env[VLLM_ENV]}")
    if env.get(PINS_ENV):
        return Settings(True, route, f"{PINS_ENV} is set")
    if route:
        return Settings(True, True, f"{ROUTE_ENV}={env[ROUTE_ENV]}")
    return Settings(False, False, f"none of {PINS_ENV}, {VLLM_ENV}=1 or {ROUTE_ENV}=1 is set")
