"""Break one declared internal of the real, imported FlashInfer in this process, the way a
release could: ``removed``, ``renamed``, ``signature`` (differently named parameters),
``rebound`` (same signature, but the factory's body is no longer FlashInfer's), ``raising`` or
``wrong_shape`` (same signature and code, different behaviour).

The path is walked here, independently of ``Internal.resolve``, so a bug in the boundary cannot
hide a mutation that did not happen. ``raising`` and ``wrong_shape`` keep the original's
signature and ``__wrapped__`` (as a decorator would): only calling the internal can reveal them,
which is what a behavioural check is for. ``signature`` and ``rebound`` wrappers have no
``__wrapped__``, so inspecting them shows the change.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

from fi_patches.internals import Declared, Internal, OneOf, absence

SUFFIX = "_drift"
"""What ``renamed`` appends to the name, and ``signature`` to each parameter's name."""

DRIFT_MESSAGE = "drift"
"""The ``RuntimeError`` message of a ``raising`` internal."""


class NotApplicable(Exception):
    """The internal is not there to be broken (absent in this release)."""


def _call_part(obj: Any, part: str) -> Any:
    return getattr(obj, part[:-2])() if part.endswith("()") else getattr(obj, part)


def owner_of(internal: Internal) -> tuple[Any, str]:
    """``(owner, name)``: the module, class or instance holding the internal's last part."""
    obj: Any = importlib.import_module(internal.module)
    parts = internal.attr.split(".")
    for part in parts[:-1]:
        obj = _call_part(obj, part)
    return obj, parts[-1]


def present(internal: Internal) -> bool:
    """Whether the internal's path resolves here (walked independently of the boundary)."""
    try:
        if not internal.attr:
            importlib.import_module(internal.module)
            return True
        owner, name = owner_of(internal)
        getattr(owner, name)
    except Exception:
        return False
    return True


def _defining(owner: Any, name: str) -> list[Any]:
    """The namespaces whose ``__dict__`` holds ``name``: the classes of a class's MRO that
    define it (``object`` never), else the module or instance itself."""
    if isinstance(owner, type):
        found = [c for c in owner.__mro__ if c is not object and name in vars(c)]
    else:
        found = [owner] if name in vars(owner) else []
    if not found:
        raise NotApplicable(f"{name} is not in the namespace of {owner!r} (a lookup hook?)")
    return found


def _raw(owner: Any, name: str) -> Any:
    """The attribute as stored (a class's ``staticmethod``/``classmethod`` kept as such)."""
    return vars(_defining(owner, name)[0])[name]


def _delete(owner: Any, name: str) -> None:
    for namespace in _defining(owner, name):
        delattr(namespace, name)


def _remove_module(name: str) -> str:
    importlib.import_module(name)
    sys.modules[name] = None  # type: ignore[assignment]  # import now raises ModuleNotFoundError
    parent, _, child = name.rpartition(".")
    if parent and child in vars(sys.modules[parent]):
        delattr(sys.modules[parent], child)
    return f"import {name} now fails (sys.modules entry None, parent attribute dropped)"


def _rewrap(
    raw: Any, on_class: bool, make: Callable[[Callable[..., Any], bool], Callable[..., Any]]
) -> Any:
    """``make(function, keeps_first)`` applied inside the descriptor ``raw`` is stored as
    (``keeps_first``: the function's first parameter is ``self`` or ``cls``)."""
    if isinstance(raw, classmethod):
        return classmethod(make(raw.__func__, True))
    if isinstance(raw, staticmethod):
        return staticmethod(make(raw.__func__, False))
    return make(raw, on_class and isinstance(raw, types.FunctionType))


def _renamed_parameters(fn: Callable[..., Any], keeps_first: bool) -> Callable[..., Any]:
    """A wrapper whose parameters are renamed (``self``/``cls`` kept) and that forwards
    positionally; old keyword names now fail, as they would against the new release."""
    old = inspect.signature(fn)
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    params = [
        p if (i == 0 and keeps_first) or p.kind in variadic else p.replace(name=p.name + SUFFIX)
        for i, p in enumerate(old.parameters.values())
    ]
    new = old.replace(parameters=params)
    pairs = list(zip(new.parameters.values(), old.parameters.values(), strict=True))

    def renamed(*args: Any, **kwargs: Any) -> Any:
        bound = new.bind(*args, **kwargs)
        bound.apply_defaults()
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for param, original in pairs:
            value = bound.arguments[param.name]
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                positional.extend(value)
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                keywords.update(value)
            elif param.kind is inspect.Parameter.KEYWORD_ONLY:
                keywords[original.name] = value
            else:
                positional.append(value)
        return fn(*positional, **keywords)

    renamed.__signature__ = new  # type: ignore[attr-defined]
    renamed.__name__ = renamed.__qualname__ = getattr(fn, "__name__", "renamed")
    return renamed


def _rebound(fn: Callable[..., Any], keeps_first: bool) -> Callable[..., Any]:
    """Same signature, forwards every call, but its own body (no ``__wrapped__``)."""

    def rebound(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    rebound.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    rebound.__name__ = rebound.__qualname__ = getattr(fn, "__name__", "rebound")
    return rebound


def _raising(fn: Callable[..., Any], keeps_first: bool) -> Callable[..., Any]:
    @functools.wraps(fn)
    def raising(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(DRIFT_MESSAGE)

    return raising


def _wrong_shape(fn: Callable[..., Any], keeps_first: bool) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrong_shape(*args: Any, **kwargs: Any) -> Any:
        return object()

    return wrong_shape


WRAPPERS = {
    "signature": _renamed_parameters,
    "rebound": _rebound,
    "raising": _raising,
    "wrong_shape": _wrong_shape,
}


def _mutate_attribute(internal: Internal, mutation: str) -> str:
    owner, name = owner_of(internal)
    raw = _raw(owner, name)
    if mutation == "removed":
        _delete(owner, name)
        return f"deleted {internal.path}"
    if mutation == "renamed":
        _delete(owner, name)
        setattr(owner, name + SUFFIX, raw)
        return f"moved {internal.path} to {name + SUFFIX}"
    if mutation == "wrong_shape" and not callable(getattr(owner, name)):
        setattr(owner, name, object())
        return f"set {internal.path} to object()"
    if mutation not in WRAPPERS:
        raise ValueError(f"unknown mutation {mutation!r}")
    setattr(owner, name, _rewrap(raw, isinstance(owner, type), WRAPPERS[mutation]))
    return f"replaced {internal.path} ({mutation})"


def apply(declared: Declared, mutation: str) -> str:
    """Break ``declared`` by ``mutation`` in this process; returns what was done.
    :class:`NotApplicable` when it is not there to break (nothing is changed then)."""
    if isinstance(declared, OneOf):
        if mutation != "removed":
            raise ValueError(f"a OneOf can only be removed, not {mutation!r}")
        there = [o for o in declared.options if present(o)]
        if not there:
            raise NotApplicable(absence(declared))
        return "; ".join(apply(o, mutation) for o in there)
    if not present(declared):
        raise NotApplicable(absence(declared))
    if not declared.attr:
        if mutation not in ("removed", "renamed"):
            raise ValueError(f"a module can only be removed or renamed, not {mutation!r}")
        return _remove_module(declared.module)
    return _mutate_attribute(declared, mutation)


def _still_defined(internal: Internal) -> bool:
    """Whether the internal is still there: resolvable, and for a class attribute defined by
    the class or a base other than ``object`` (``__init__`` then falls back to object's)."""
    if not present(internal):
        return False
    if not internal.attr:
        return True
    owner, name = owner_of(internal)
    if isinstance(owner, type):
        return any(name in vars(c) for c in owner.__mro__ if c is not object)
    return True


def took_effect(declared: Declared, mutation: str, before: Any) -> str | None:
    """None when the internal now looks broken by ``mutation`` from outside; else what is
    wrong with the mutation (a harness bug)."""
    options = declared.options if isinstance(declared, OneOf) else (declared,)
    if mutation in ("removed", "renamed"):
        still = [o.path for o in options if _still_defined(o)]
        return f"{', '.join(still)} still resolves" if still else None
    internal = options[0]
    owner, name = owner_of(internal)
    now = getattr(owner, name)
    if now is before:
        return f"{internal.path} is the original object"
    if mutation == "raising":
        try:
            now()
        except RuntimeError as exc:
            return None if str(exc) == DRIFT_MESSAGE else f"raised {exc!r}"
        except TypeError:
            pass
        return f"calling {internal.path} did not raise RuntimeError({DRIFT_MESSAGE!r})"
    if mutation == "signature":
        names = list(inspect.signature(now).parameters)
        if not any(n.endswith(SUFFIX) for n in names):
            return f"{internal.path} kept its parameter names {names}"
    if mutation == "rebound" and hasattr(now, "__wrapped__"):
        return f"{internal.path} still has __wrapped__"
    return None
