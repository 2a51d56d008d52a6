"""Every environment variable fi_patches reads, in one place, each with what it does, and the
settings read from them: the vLLM and SGLang plugins' (:func:`vllm_settings`,
:func:`sglang_settings`) and the automatic rank guard's (:func:`rank_guard_mode`).

Other modules ask :func:`get`, :func:`flag` or a settings reader here and never read
``os.environ`` themselves, so this list is complete. The exceptions are the start-up
hook (the line in ``fi_patches_auto.pth`` and :mod:`fi_patches.startup`), which must import
nothing at interpreter start; they read :data:`AUTO` by name, with :func:`boolean`'s words
spelled out (``tests/test_startup_hook.py`` checks they agree).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "FI_PATCHES_"


@dataclass(frozen=True)
class Variable:
    """An environment variable: its name and a sentence for docs/env.md and ``doctor``."""

    name: str
    doc: str


DEVICE = Variable(
    "FI_PATCHES_DEVICE",
    "target arch (sm_103) instead of the CUDA device, for offline validation and CPU tests; it "
    "wins over the device (see fi_patches.compat.target)",
)
PINS = Variable(
    "FI_PATCHES_PINS", "path of the default pin table, read once per process (refresh() rereads)"
)
ALLOW_UNVERIFIED = Variable(
    "FI_PATCHES_ALLOW_UNVERIFIED",
    "1: enable a FlashInfer newer than verified when every probe and self-check passes",
)
AUTO = Variable(
    "FI_PATCHES_AUTO", "1: apply the default pins from interpreter start (the .pth start-up hook)"
)
PTXAS = Variable(
    "FI_PATCHES_PTXAS", "path of the ptxas that reads wide kernels' resources (precompile)"
)
VLLM = Variable(
    "FI_PATCHES_VLLM",
    "1: activate the vLLM plugin (FI_PATCHES_PINS or FI_PATCHES_VLLM_ROUTE=1 also do); 0: keep "
    "it off whatever else is set",
)
VLLM_ROUTE = Variable(
    "FI_PATCHES_VLLM_ROUTE", "1: route vLLM's cute-dsl MXFP8 linears through fi_patches.mxfp8.mm"
)
SGLANG = Variable(
    "FI_PATCHES_SGLANG",
    "1: activate the SGLang plugin (FI_PATCHES_PINS also does); 0: keep it off whatever else is "
    "set",
)
CACHE_DIR = Variable(
    "FI_PATCHES_CACHE_DIR",
    "where self-check outcomes are kept (default $XDG_CACHE_HOME/fi_patches, else "
    "~/.cache/fi_patches); off keeps none",
)
RANK_GUARD = Variable(
    "FI_PATCHES_RANK_GUARD",
    "mode of the rank guard run before FlashInfer's set_autotune_process_group while fi_patches "
    "is active: raise (default), disable, warn or off",
)
RANK_GUARD_TUNING = Variable(
    "FI_PATCHES_RANK_GUARD_TUNING",
    "1: the tuning divergence detector, read when fi_patches activates",
)
CUTE_DSL_ARCH = Variable(
    "CUTE_DSL_ARCH",
    "the CuTe DSL's own compile target; fi_patches compiles wide kernels for it when neither an "
    "arch nor FI_PATCHES_DEVICE is given and there is no CUDA device",
)

VARIABLES: tuple[Variable, ...] = (
    DEVICE,
    PINS,
    ALLOW_UNVERIFIED,
    AUTO,
    CACHE_DIR,
    PTXAS,
    VLLM,
    VLLM_ROUTE,
    SGLANG,
    RANK_GUARD,
    RANK_GUARD_TUNING,
    CUTE_DSL_ARCH,
)
"""Every variable fi_patches reads, in the order docs/env.md lists them."""

TRUE_WORDS = ("1", "true", "yes", "on")
"""How a boolean variable says yes (any case, surrounding spaces ignored)."""
FALSE_WORDS = ("0", "false", "no", "off", "")
"""How a boolean variable says no; set and empty is no too."""

logger = logging.getLogger("fi_patches.env")
_warned: set[tuple[str, str]] = set()


def get(variable: Variable) -> str | None:
    """The variable's value, or None when it is unset or empty."""
    value = os.environ.get(variable.name)
    return value if value else None


def boolean(
    variable: Variable, environ: Mapping[str, str] | None = None, default: bool | None = None
) -> bool | None:
    """The boolean a variable holds (:data:`TRUE_WORDS`, :data:`FALSE_WORDS`), read from
    ``environ`` (the process environment by default). Unset gives ``default``, and so does any
    other value, after one warning naming the variable and its value: every boolean variable,
    the start-up hook's included, reads one way."""
    env = os.environ if environ is None else environ
    raw = env.get(variable.name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    _warn_once(
        variable,
        raw,
        "is not a boolean (%s for on, %s or empty for off); using the default (%s)",
        "/".join(TRUE_WORDS),
        "/".join(w for w in FALSE_WORDS if w),
        {True: "on", False: "off", None: "unset"}[default],
    )
    return default


def _warn_once(variable: Variable, raw: str, problem: str, *args: object) -> None:
    """Log ``NAME='value' <problem>`` once per variable and value (a setting read on every call
    must not flood a server's log)."""
    if (variable.name, raw) in _warned:
        return
    _warned.add((variable.name, raw))
    logger.warning("%s=%r " + problem, variable.name, raw, *args)


def flag(variable: Variable) -> bool:
    """Whether the variable is on (:func:`boolean`, off by default)."""
    return bool(boolean(variable, default=False))


def environ() -> Mapping[str, str]:
    """The process environment, for readers that must tell an unset variable from ``0``."""
    return os.environ


def settings() -> dict[str, str]:
    """Every ``FI_PATCHES_*`` variable set in this process, sorted by name (for reports and the
    rank guard's fingerprint)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(PREFIX)}


@dataclass(frozen=True)
class Settings:
    """What the user asked of a host plugin (vLLM's or SGLang's), and which variable asked it."""

    active: bool
    route: bool
    why: str


def vllm_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The vLLM plugin's settings in ``environ`` (the process environment by default).

    The plugin is off unless the user opts in: ``FI_PATCHES_PINS`` (a pin table to apply),
    ``FI_PATCHES_VLLM=1`` or ``FI_PATCHES_VLLM_ROUTE=1``. ``FI_PATCHES_VLLM=0`` keeps it off
    whatever else is set; ``FI_PATCHES_VLLM_ROUTE=1`` also routes vLLM's cute-dsl MXFP8
    linears. A switch that is not a boolean counts as unset, with one warning (:func:`boolean`).
    """
    env = os.environ if environ is None else environ
    switch = boolean(VLLM, env)
    route = bool(boolean(VLLM_ROUTE, env))
    if switch is False:
        return Settings(False, False, f"{VLLM.name}={env[VLLM.name]} turns it off")
    if switch:
        return Settings(True, route, f"{VLLM.name}={env[VLLM.name]}")
    if env.get(PINS.name):
        return Settings(True, route, f"{PINS.name} is set")
    if route:
        return Settings(True, True, f"{VLLM_ROUTE.name}={env[VLLM_ROUTE.name]}")
    return Settings(
        False, False, f"none of {PINS.name}, {VLLM.name}=1 or {VLLM_ROUTE.name}=1 is set"
    )


def sglang_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The SGLang plugin's settings in ``environ`` (the process environment by default): off
    unless ``FI_PATCHES_PINS`` or ``FI_PATCHES_SGLANG=1`` is set; ``FI_PATCHES_SGLANG=0`` keeps
    it off whatever else is set (a value that is not a boolean counts as unset, warned once)."""
    env = os.environ if environ is None else environ
    on = boolean(SGLANG, env)
    if on is False:
        return Settings(False, False, f"{SGLANG.name}={env[SGLANG.name]} turns it off")
    if on:
        return Settings(True, False, f"{SGLANG.name}={env[SGLANG.name]}")
    if env.get(PINS.name):
        return Settings(True, False, f"{PINS.name} is set")
    return Settings(False, False, f"neither {PINS.name} nor {SGLANG.name}=1 is set")


GUARD_MODES = ("raise", "disable", "warn")
"""What :func:`~fi_patches.ranks.guard.rank_guard` does when the ranks disagree."""
AUTOMATIC_GUARD_MODES = (*GUARD_MODES, "off")
"""The modes ``FI_PATCHES_RANK_GUARD`` takes for the automatic guard."""
DEFAULT_GUARD_MODE = "raise"


def rank_guard_mode() -> str:
    """The automatic rank guard's mode from ``FI_PATCHES_RANK_GUARD`` (default ``raise``); an
    unknown value logs one warning and keeps the default, the safe choice."""
    raw = (get(RANK_GUARD) or "").strip().lower()
    if not raw:
        return DEFAULT_GUARD_MODE
    if raw in AUTOMATIC_GUARD_MODES:
        return raw
    _warn_once(
        RANK_GUARD,
        raw,
        "is not one of %s; using %r",
        "|".join(AUTOMATIC_GUARD_MODES),
        DEFAULT_GUARD_MODE,
    )
    return DEFAULT_GUARD_MODE


def rank_guard_tuning() -> bool:
    """Whether ``FI_PATCHES_RANK_GUARD_TUNING`` asks for the tuning divergence detector."""
    return flag(RANK_GUARD_TUNING)
