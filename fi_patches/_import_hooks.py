"""Post-import hooks: :func:`when_imported` runs a callback once a named module has been
imported (at once if it already is). fi_patches' one mechanism for it: the start-up hook, the
process-wide activation and the vLLM route register here.

One finder sits on ``sys.meta_path`` while a hook waits. It lets the regular finders and loader
import the module, runs the module's hooks after its body ran, and leaves ``sys.meta_path`` when
none waits. It imports only what the interpreter has loaded at start (the start-up hook pays
for anything more in every process).
"""

from __future__ import annotations

import sys
from _thread import RLock

TYPE_CHECKING = False  # not typing's: importing typing would cost every interpreter start
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    Hook = Callable[[ModuleType], object]

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
