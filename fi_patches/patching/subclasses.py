"""Wrap a method on every FlashInfer runner class of a given name, those that exist now and
those created later.

FlashInfer builds its CuTe DSL runner classes inside factory functions (one class per call
before 0.7.4, one per ``lru_cache`` key from 0.7.4), so there is no module attribute to patch
where the tuner looks the method up. The classes are found among the runner base class's
subclasses, and new ones through a temporary ``__init_subclass__`` on that base.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.patching.patch import Replacement

logger = get_logger(__name__)

_lock = threading.RLock()


def all_subclasses(base: type) -> list[type]:
    """Every live class deriving from ``base``, at any depth."""
    found: list[type] = []
    seen: set[int] = set()
    stack = [base]
    while stack:
        subclasses: list[type] = type.__subclasses__(stack.pop())
        for sub in subclasses:
            if id(sub) not in seen:
                seen.add(id(sub))
                found.append(sub)
                stack.append(sub)
    return found


class _SubclassWatch:
    """Calls listeners for each new subclass of ``base`` while at least one is registered."""

    def __init__(self, base: type) -> None:
        self.base = base
        self.listeners: list[Callable[[type], None]] = []
        self._had_own = False
        self._original: Any = None
        self._installed: Any = None

    def add(self, listener: Callable[[type], None]) -> None:
        if not self.listeners:
            self._install()
        self.listeners.append(listener)

    def remove(self, listener: Callable[[type], None]) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)
        if not self.listeners:
            self._uninstall()

    def _install(self) -> None:
        namespace = vars(self.base)
        self._had_own = "__init_subclass__" in namespace
        self._original = namespace.get("__init_subclass__")
        watch = self
        base = self.base

        def __init_subclass__(cls: type, **kwargs: Any) -> None:
            if watch._original is not None:
                watch._original.__get__(None, cls)(**kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type, misc]
            for listener in list(watch.listeners):
                try:
                    listener(cls)
                except Exception:
                    log_once(
                        logger,
                        logging.ERROR,
                        f"subclass:{cls.__qualname__}",
                        "fi_patches could not patch new class %s; it runs unpatched",
                        cls.__qualname__,
                        exc_info=True,
                    )

        self._installed = classmethod(__init_subclass__)
        type.__setattr__(self.base, "__init_subclass__", self._installed)

    def _uninstall(self) -> None:
        if vars(self.base).get("__init_subclass__") is self._installed:
            if self._had_own:
                type.__setattr__(self.base, "__init_subclass__", self._original)
            else:
                type.__delattr__(self.base, "__init_subclass__")
        self._installed = None


_watches: dict[int, _SubclassWatch] = {}


def _watch(base: type) -> _SubclassWatch:
    watch = _watches.get(id(base))
    if watch is None or watch.base is not base:
        watch = _watches[id(base)] = _SubclassWatch(base)
    return watch


class RunnerMethodPatch:
    """Wraps ``method`` of every subclass of ``base`` named ``class_name`` from ``module``."""

    def __init__(
        self, base: type, module: str, class_name: str, method: str, make: Replacement
    ) -> None:
        self.base = base
        self.module = module
        self.class_name = class_name
        self.method = method
        self.make = make
        self.active = False
        self._patched: list[tuple[weakref.ref[type], Any, Any]] = []

    def describe(self) -> str:
        return f"{self.module}.<factory>.{self.class_name}.{self.method}"

    def matches(self, cls: type) -> bool:
        return cls.__name__ == self.class_name and cls.__module__ == self.module

    def _patch_class(self, cls: type) -> None:
        if not self.matches(cls):
            return
        with _lock:
            original = vars(cls).get(self.method)
            if original is None:
                log_once(
                    logger,
                    logging.WARNING,
                    f"nomethod:{cls.__qualname__}.{self.method}",
                    "%s defines no %s; left unpatched",
                    cls.__qualname__,
                    self.method,
                )
                return
            if any(installed is original for _, _, installed in self._patched):
                return
            installed = self.make(original, self)
            type.__setattr__(cls, self.method, installed)
            self._patched = [entry for entry in self._patched if entry[0]() is not None]
            self._patched.append((weakref.ref(cls), original, installed))

    def apply(self) -> None:
        with _lock:
            if self.active:
                return
            self.active = True
            try:
                _watch(self.base).add(self._patch_class)
                for cls in all_subclasses(self.base):
                    self._patch_class(cls)
            except Exception:
                self.revert()
                raise

    def revert(self) -> None:
        with _lock:
            if not self.active and not self._patched:
                return
            self.active = False
            _watch(self.base).remove(self._patch_class)
            for ref, original, installed in self._patched:
                cls = ref()
                if cls is None:
                    continue
                if vars(cls).get(self.method) is installed:
                    type.__setattr__(cls, self.method, original)
                else:
                    logger.warning(
                        "%s.%s was replaced after fi_patches wrapped it; leaving it in place",
                        cls.__qualname__,
                        self.method,
                    )
            self._patched = []
