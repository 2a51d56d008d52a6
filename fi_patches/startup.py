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
``import flashinfer`` (:func:`when_imported`, below) that instruments the process-wide pins
(:func:`fi_patches.activation.enable`) once FlashInfer's own import ran. This module imports
nothing beyond what the interpreter has loaded already: a serving host starts many workers, and
each pays what it costs.

Post-import hooks: :func:`when_imported` runs a callback once a named module has been imported
(at once if it already is). fi_patches' one mechanism for it: the start-up hook, the
process-wide activation and the vLLM route register here. One finder sits on ``sys.meta_path``
while a hook waits. It lets the regular finders and loader import the module, runs the
module's hooks after its body ran, and leaves ``sys.meta_path`` when none waits.
"""

from __future__ import annotations

import os
import sys
from _thread import RLock

TYPE_CHECKING = False  # not typing's: importing typing would cost every interpreter start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Protocol

    Hook = Callable[[ModuleType], object]

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
    "rank_guard": "fi_patches.ranks:GUARD",
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


# post-import hooks ----------

_lock = RLock()
_hooks: dict[str, list[Hook]] = {}
"""The callbacks waiting for each module's import, in registration order."""


class _Loader:
    """The regular loader of a hooked module, with its hooks run after it executed the module.
    It puts the regular loader back on the module and its spec before executing, so nothing of
    this mechanism stays visible on the module afterwards."""

    def __init__(self, loader: object) -> None:
        self._loader = loader

    def create_module(self, spec: object) -> object:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        self._loader.exec_module(module)  # type: ignore[attr-defined]
        _fire(module)

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)


class _Finder:
    """The ``sys.meta_path`` finder: for a module with waiting hooks, the regular finders'
    spec with its loader wrapped; for any other module, nothing."""

    def __init__(self) -> None:
        self._searching: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _hooks or fullname in self._searching:
            return None
        self._searching.add(fullname)
        try:
            spec: ModuleSpec | None = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None) if finder is not self else None
                if find is not None:
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
        except Exception:
            return None  # the regular import machinery runs and reports it
        finally:
            self._searching.discard(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        spec.loader = _Loader(loader)  # type: ignore[union-attr]
        return spec


def _is_ours(finder: object) -> bool:
    """This module's finder (of this copy of fi_patches or of another one)."""
    kind = type(finder)
    return kind.__name__ == _Finder.__name__ and kind.__module__ == _Finder.__module__


def _fire(module: ModuleType) -> None:
    """Run ``module``'s waiting hooks once each, in order; a failing hook is logged and never
    reaches the importer."""
    with _lock:
        hooks = _hooks.pop(module.__name__, [])
        if not _hooks:
            _leave()
    for hook in hooks:
        try:
            hook(module)
        except Exception:
            import logging

            logging.getLogger("fi_patches.import_hooks").exception(
                "fi_patches' hook on the import of %s failed; %s is left as imported",
                module.__name__,
                module.__name__,
            )


def _leave() -> None:
    """Take the finder off ``sys.meta_path``. A new list replaces the old one, so an import
    that another thread is resolving over the old list meanwhile skips no finder."""
    if any(_is_ours(f) for f in sys.meta_path):
        sys.meta_path = [f for f in sys.meta_path if not _is_ours(f)]


def when_imported(name: str, hook: Hook) -> None:
    """Run ``hook(module)`` once module ``name`` is imported: now if it already is, else right
    after its import (a failed import runs nothing; the next one does)."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _hooks.setdefault(name, []).append(hook)
            if not any(_is_ours(f) for f in sys.meta_path):
                sys.meta_path.insert(0, _Finder())
            return
    hook(module)


def discard(name: str, hook: Hook) -> None:
    """Stop ``hook`` from waiting for ``name`` (nothing if it does not)."""
    with _lock:
        waiting = _hooks.get(name, [])
        if hook in waiting:
            waiting.remove(hook)
        if not waiting:
            _hooks.pop(name, None)
        if not _hooks:
            _leave()


def waiting(name: str, hook: Hook | None = None) -> bool:
    """Whether ``hook`` (None: any hook) still waits for the import of ``name``."""
    with _lock:
        hooks = _hooks.get(name, [])
        return bool(hooks) if hook is None else hook in hooks


# the start-up hook ----------

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
            when_imported(TARGET, _activate)
    except Exception:
        import logging

        logging.getLogger("fi_patches.startup").exception(
            "fi_patches' start-up hook could not be installed; FlashInfer is left stock"
        )


def remove() -> None:
    """Stop waiting for ``import flashinfer`` (if the hook still waits)."""
    discard(TARGET, _activate)


def pending() -> bool:
    """Whether the start-up hook still waits for ``import flashinfer``."""
    return waiting(TARGET, _activate)


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
