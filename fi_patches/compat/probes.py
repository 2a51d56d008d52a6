"""Probes of FlashInfer internals. Each probe checks one thing a feature relies on and, when it
fails, returns one sentence saying what is missing or changed."""

from __future__ import annotations

import importlib
import inspect
import types
from dataclasses import dataclass, field
from typing import Any, Protocol


class Probe(Protocol):
    """A check of one internal: ``check()`` returns None when it holds, else the reason."""

    def describe(self) -> str: ...

    def check(self) -> str | None: ...


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def resolve(module: str, qualname: str) -> Any:
    """The object at ``module:qualname`` (dotted attribute path); raises what the lookup raises."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class ModuleProbe:
    """The module imports."""

    module: str

    def describe(self) -> str:
        return f"module {self.module}"

    def check(self) -> str | None:
        try:
            importlib.import_module(self.module)
        except Exception as exc:
            return f"{self.module} is not importable ({_error(exc)})"
        return None


@dataclass(frozen=True)
class CallableProbe:
    """``module:qualname`` exists, is callable, and its leading parameters are ``params``.

    For a method (``Class.method``) the ``self`` parameter is not listed.
    """

    module: str
    qualname: str
    params: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.module}.{self.qualname}({', '.join(self.params)})"

    def check(self) -> str | None:
        try:
            obj = resolve(self.module, self.qualname)
        except Exception as exc:
            return f"{self.module}.{self.qualname} is missing ({_error(exc)})"
        if not callable(obj):
            return f"{self.module}.{self.qualname} is not callable (it is {type(obj).__name__})"
        if not self.params:
            return None
        target = inspect.unwrap(obj)
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError) as exc:
            return f"{self.module}.{self.qualname} has no readable signature ({_error(exc)})"
        names = [p.name for p in signature.parameters.values()]
        if "." in self.qualname and names and names[0] in ("self", "cls"):
            names = names[1:]
        if tuple(names[: len(self.params)]) != self.params:
            return (
                f"{self.module}.{self.qualname} changed signature: expected "
                f"({', '.join(self.params)}, ...), found ({', '.join(names)})"
            )
        return None


def _nested_code(code: types.CodeType) -> list[types.CodeType]:
    found = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.append(const)
            found.extend(_nested_code(const))
    return found


@dataclass(frozen=True)
class FactoryClassProbe:
    """``module:factory`` defines a class named ``class_name`` in its body with the ``methods``.

    This is how FlashInfer binds its CuTe DSL runners: the class is built inside the factory,
    so fi_patches finds it among ``TunableRunner``'s subclasses rather than by attribute.
    """

    module: str
    factory: str
    class_name: str
    methods: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        return f"{self.module}.{self.factory} builds class {self.class_name}"

    def check(self) -> str | None:
        try:
            obj = inspect.unwrap(resolve(self.module, self.factory))
        except Exception as exc:
            return f"{self.module}.{self.factory} is missing ({_error(exc)})"
        code = getattr(obj, "__code__", None)
        if code is None:
            return f"{self.module}.{self.factory} is not a Python function"
        bodies = [c for c in _nested_code(code) if c.co_name == self.class_name]
        if not bodies:
            return (
                f"{self.module}.{self.factory} no longer defines class {self.class_name} "
                "(FlashInfer changed how it binds this runner)"
            )
        defined = {c.co_name for body in bodies for c in _nested_code(body)}
        missing = [m for m in self.methods if m not in defined]
        if missing:
            return (
                f"class {self.class_name} in {self.factory} no longer defines {', '.join(missing)}"
            )
        return None


@dataclass(frozen=True)
class AttributeProbe:
    """``module:qualname`` exists (any object)."""

    module: str
    qualname: str

    def describe(self) -> str:
        return f"{self.module}.{self.qualname}"

    def check(self) -> str | None:
        try:
            resolve(self.module, self.qualname)
        except Exception as exc:
            return f"{self.module}.{self.qualname} is missing ({_error(exc)})"
        return None


@dataclass(frozen=True)
class AnyOfProbe:
    """At least one of ``probes`` holds (a helper that moved between releases)."""

    probes: tuple[Probe, ...]

    def describe(self) -> str:
        return " or ".join(p.describe() for p in self.probes)

    def check(self) -> str | None:
        reasons = [p.check() for p in self.probes]
        if any(r is None for r in reasons):
            return None
        return "none of " + "; ".join(r for r in reasons if r)
