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

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


class SettingError(ValueError):
    """An environment variable of the integration holds a value it does not understand."""


@dataclass(frozen=True)
class Settings:
    """What the user asked of the plugin, and which variable asked it."""

    active: bool
    route: bool
    why: str


def switch(environ: Mapping[str, str], name: str) -> bool | None:
    """``name``'s boolean value in ``environ``, None when unset; :class:`SettingError` otherwise
    (the SGLang plugin reads its switch with this too)."""
    if name not in environ:
        return None
    value = environ[name].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingError(f"{name}={environ[name]!r} is not 1 or 0")


def read(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings in ``environ`` (``os.environ`` by default); raises :class:`SettingError`
    naming the variable and its value when one is not understood."""
    env = _env.environ() if environ is None else environ
    on = switch(env, VLLM_ENV)
    route = bool(switch(env, ROUTE_ENV))
    if on is False:
        return Settings(False, False, f"{VLLM_ENV}={env[VLLM_ENV]} turns it off")
    if on:
        return Settings(True, route, f"{VLLM_ENV}={env[VLLM_ENV]}")
    if env.get(PINS_ENV):
        return Settings(True, route, f"{PINS_ENV} is set")
    if route:
        return Settings(True, True, f"{ROUTE_ENV}={env[ROUTE_ENV]}")
    return Settings(False, False, f"none of {PINS_ENV}, {VLLM_ENV}=1 or {ROUTE_ENV}=1 is set")
