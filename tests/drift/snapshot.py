"""What FlashInfer looks like from outside, by identity: the namespaces of its imported modules,
of its classes that fi_patches patches, of every live runner class and of the tuner singleton.
Comparing two snapshots says which attribute fi_patches left changed."""

from __future__ import annotations

import functools
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

import fi_patches

_FI_PATCHES_DIR = os.path.dirname(os.path.abspath(fi_patches.__file__)) + os.sep
_MISSING = object()
_BOOKKEEPING = frozenset({"__warningregistry__"})
"""Names Python itself adds to a module (``warnings`` records what it warned about there)."""


@functools.cache
def from_fi_patches(filename: str) -> bool:
    """Whether ``filename`` is a source file of the fi_patches package (memoized: every
    settle asks it of the same tens of thousands of functions)."""
    return os.path.abspath(filename).startswith(_FI_PATCHES_DIR)


def _subclasses(cls: type) -> list[type]:
    found, todo = [], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def _namespaces(modules: tuple[str, ...], classes: tuple[Any, ...]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "flashinfer" or name.startswith("flashinfer.")):
            found[f"module {name}"] = module
    for name in modules:
        if sys.modules.get(name) is not None:
            found[f"module {name}"] = sys.modules[name]
    bases = [c for c in classes if isinstance(c, type)]
    for base in list(bases):
        bases.extend(s for s in _subclasses(base) if s.__module__.startswith("flashinfer"))
    for cls in bases:
        found[f"class {cls.__module__}.{cls.__qualname__}#{id(cls):x}"] = cls
    for obj in classes:
        if isinstance(obj, types.ModuleType):
            found[f"module {obj.__name__}"] = obj
        elif not isinstance(obj, type):
            found[f"instance {type(obj).__qualname__}#{id(obj):x}"] = obj
    return found


@dataclass
class Snapshot:
    """Every attribute of the namespaces, as the objects themselves."""

    namespaces: dict[str, tuple[Any, dict[str, Any]]]

    @classmethod
    def take(cls, modules: tuple[str, ...], objects: tuple[Any, ...]) -> Snapshot:
        """Snapshot FlashInfer's imported modules, ``modules`` (names), and ``objects``
        (modules, classes with their FlashInfer subclasses, or instances)."""
        spaces = _namespaces(modules, objects)
        return cls({label: (ns, dict(vars(ns))) for label, ns in spaces.items()})

    def changes(self) -> list[str]:
        """Each attribute that is no longer the same object, or was added (a submodule
        imported since is not a change), as ``namespace.name: what``."""
        found = []
        for label, (namespace, before) in self.namespaces.items():
            now = vars(namespace)
            for name, value in before.items():
                current = now.get(name, _MISSING)
                if current is _MISSING:
                    found.append(f"{label}.{name}: removed")
                elif current is not value:
                    found.append(f"{label}.{name}: {_describe(value)} -> {_describe(current)}")
            for name in now.keys() - before.keys():
                if name not in _BOOKKEEPING and not isinstance(now[name], types.ModuleType):
                    found.append(f"{label}.{name}: added {_describe(now[name])}")
        return found


def foreign_attributes(modules: tuple[str, ...], objects: tuple[Any, ...]) -> list[str]:
    """Attributes of FlashInfer's namespaces (runner classes made since included) that hold a
    function of fi_patches: a patch left behind."""
    found = []
    for label, namespace in _namespaces(modules, objects).items():
        for name, value in list(vars(namespace).items()):
            if _is_foreign(value):
                found.append(f"{label}.{name}: {_describe(value)}")
    return found


def _is_foreign(value: Any) -> bool:
    if type(value) is types.FunctionType:  # the common case, decided without the checks below
        return from_fi_patches(value.__code__.co_filename)
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    code = getattr(value, "__code__", None)
    return (
        isinstance(value, types.FunctionType)
        and code is not None
        and from_fi_patches(code.co_filename)
    )


def _describe(value: Any) -> str:
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{name} at {id(value):x}"
