"""The lifecycle of fi_patches' patches, importing nothing: the registry of patch sets, the
interpreter start-up hook, and whether process-wide pins are requested.

Lifecycle registry (in the manner of OpenTelemetry's instrumentors): each patch set is one
object with a ``name``, ``instrument()``, ``uninstrument()`` (the exact original objects back)
and ``installed``, registered in :data:`LIFECYCLE` as ``"module:attr"`` so that no feature
module is imported before it installs something. :func:`disable` (``fi_patches.disable()``),
``fi_patches.refresh()`` and ``doctor`` iterate over :func:`loaded`: an entry whose module was
never imported has installed nothing.

Start-up hook: ``fi_patches_auto.pth`` in site-packages calls :func:`install` when
``FI_PATCHES_AUTO`` is set (in the manner of coverage's process start-up hook). Without the
variable the ``.pth`` line only reads ``os.environ``. :func:`install` registers a hook on
``import flashinfer`` (:mod:`fi_patches._import_hooks`) that instruments the process-wide pins
(:func:`fi_patches.activation.enable`) once FlashInfer's own import ran. This module imports
nothing beyond what the interpreter has loaded already: a serving host starts many workers, and
each pays what it costs.
"""

from __future__ import annotations

import os
import sys

from fi_patches import _import_hooks

TYPE_CHECKING = False  # not typing's: importing typing would cost every interpreter start
if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType
    from typing import Any, Protocol

    class Instrumentor(Protocol):
        """A patch set's lifecycle: all or nothing, and ``uninstrument`` restores the exact
        original objects (a patch set that is not installed uninstruments to nothing)."""

        name: str

        @property
        def installed(self) -> bool: ...

        def instrument(self) -> Any: ...

        def uninstrument(self) -> None: ...


LIFECYCLE: dict[str, str] = {
    "pinning": "fi_patches.pinning.installation:PINNING",
    "rank_guard": "fi_patches.ranks.automatic:GUARD",
    "process_pins": "fi_patches.activation:PROCESS_PINS",
    "vllm_route": "fi_patches.vllm.route:ROUTE",
    "startup_hook": "fi_patches.startup:HOOK",
}
"""Every patch set, by name, as ``"module:attr"``, in the order they build on each other:
:func:`disable` uninstruments them in reverse. The pinning engine's wrappers and the rank guard
are reference-counted (each ``pinned_tactics()`` block and the process-wide pins hold them);
the wide tile, MXFP8 and CuTe DSL features install no patch of their own."""

LOADED_WITH: dict[str, str] = {"process_pins": "fi_patches.pinning.stack"}
"""Entries :func:`disable` imports when another module is: leaving every open
``pinned_tactics()`` block is the ``process_pins`` entry's, and blocks exist once the pin stack
is imported, also where :mod:`fi_patches.activation` never was."""

_requested = False


def register(name: str, target: str) -> None:
    """Add a patch set to :data:`LIFECYCLE` (``target`` is ``"module:attr"``); registering the
    same target again does nothing, another target under a taken name is a ``ValueError``."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ValueError(f"lifecycle entry {name!r}: target {target!r} is not 'module:attr'")
    if LIFECYCLE.get(name, target) != target:
        raise ValueError(f"lifecycle entry {name!r} is already {LIFECYCLE[name]!r}, not {target!r}")
    LIFECYCLE[name] = target


def unregister(name: str) -> None:
    """Remove a patch set from :data:`LIFECYCLE` (uninstrument it first)."""
    LIFECYCLE.pop(name, None)


def resolve(name: str) -> Instrumentor:
    """The patch set registered as ``name``, importing its module (to instrument it)."""
    import importlib

    module, _, attr = LIFECYCLE[name].partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def entries() -> list[tuple[str, Instrumentor | None]]:
    """Every registered patch set by name, in :data:`LIFECYCLE`'s order, with its object where
    its module is imported and None where not (it installed nothing, and is not imported to
    find that out)."""
    found: list[tuple[str, Instrumentor | None]] = []
    for name, target in list(LIFECYCLE.items()):
        module, _, attr = target.partition(":")
        found.append(
            (name, getattr(sys.modules[module], attr, None) if module in sys.modules else None)
        )
    return found


def loaded() -> list[Instrumentor]:
    """The registered patch sets whose module is imported, in :data:`LIFECYCLE`'s order."""
    return [entry for _, entry in entries() if entry is not None]


def disable() -> None:
    """Uninstrument every loaded patch set, last registered first, as ``fi_patches.disable()``
    does (the rank guard's ``on_mismatch="disable"`` calls this, from below what it takes off).
    Each is uninstrumented even when an earlier one raised; the first error is raised after."""
    global _requested
    _requested = False
    for name, trigger in LOADED_WITH.items():
        if trigger in sys.modules and name in LIFECYCLE:
            resolve(name)
    error: BaseException | None = None
    for entry in reversed(loaded()):
        try:
            entry.uninstrument()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error


def refresh() -> None:
    """Let every loaded patch set that keeps a cache of its own (a ``refresh()`` method) forget
    it, as ``fi_patches.refresh()`` does after the verdicts."""
    for entry in loaded():
        forget = getattr(entry, "refresh", None)
        if forget is not None:
            forget()


def pins_requested() -> bool:
    """Whether process-wide pins are requested (``fi_patches.auto``, ``enable()``)."""
    return _requested


def set_pins_requested(on: bool) -> None:
    """Record whether process-wide pins are requested (:mod:`fi_patches.activation` only)."""
    global _requested
    _requested = on


ENV = "FI_PATCHES_AUTO"
"""``fi_patches._env.AUTO``, spelled out: this module imports nothing, as every interpreter start
pays for what it imports (``tests/test_startup_hook.py`` checks the two agree)."""
PTH_NAME = "fi_patches_auto.pth"
TARGET = "flashinfer"

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
"""``fi_patches._env``'s boolean words, spelled out for the same reason (the test checks)."""

PTH_LINE = (
    f"import os; os.environ.get({ENV!r}, '').strip().lower() not in {FALSE_WORDS!r} and "
    "(u := __import__('importlib.util').util).find_spec('fi_patches') is not None and "
    "u.find_spec('fi_patches.startup') is not None and "
    "__import__('fi_patches.startup').startup.from_pth()"
)
"""The one line of ``fi_patches_auto.pth`` (``site`` runs lines that start with ``import``).
It asks for fi_patches only when the variable is not off, and is silent when fi_patches is
gone (the file left behind by ``pip uninstall`` of an editable install)."""


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``FI_PATCHES_AUTO`` asks for activation at start-up (as ``_env`` reads a
    boolean: a value neither on nor off is off)."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return value.strip().lower() in TRUE_WORDS


def from_pth() -> None:
    """What the ``.pth`` line runs when the variable is not off: :func:`install` when it is on;
    otherwise (a value that is not a boolean) the one warning ``_env`` gives, and nothing else."""
    if requested():
        install()
        return
    try:
        from fi_patches import _env

        _env.flag(_env.AUTO)
    except Exception:
        return  # at interpreter start; the hook stays off either way


def _activate(module: ModuleType) -> None:
    try:
        resolve("process_pins").instrument()
    except Exception:
        import logging

        logging.getLogger("fi_patches.startup").exception(
            "fi_patches' start-up hook failed; FlashInfer is left stock"
        )


def install() -> None:
    """Activate the default pins when FlashInfer is imported (at once if it already is).
    Idempotent; never raises, as it runs at interpreter start."""
    try:
        if not pending():  # else the .pth line ran again (two site directories)
            _import_hooks.when_imported(TARGET, _activate)
    except Exception:
        import logging

        logging.getLogger("fi_patches.startup").exception(
            "fi_patches' start-up hook could not be installed; FlashInfer is left stock"
        )


def remove() -> None:
    """Stop waiting for ``import flashinfer`` (if the hook still waits)."""
    _import_hooks.discard(TARGET, _activate)


def pending() -> bool:
    """Whether the start-up hook still waits for ``import flashinfer``."""
    return _import_hooks.waiting(TARGET, _activate)


class _Hook:
    """The start-up hook's lifecycle entry: instrumented while it waits for ``import
    flashinfer``."""

    name = "startup_hook"

    @property
    def installed(self) -> bool:
        return pending()

    def instrument(self) -> None:
        install()

    def uninstrument(self) -> None:
        remove()


HOOK = _Hook()
