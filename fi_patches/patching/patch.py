"""Reversible patches of FlashInfer objects: one attribute replaced by a wrapper with the exact
original put back, and a group of patches applied fully or not at all.

Every wrapper is transparent the standard way: its ``__wrapped__`` is the object it replaced, so
``inspect.unwrap`` reaches FlashInfer's own function. A wrapper off the hot path is a
``wrapt.FunctionWrapper`` (:func:`proxied`; wrapt is imported when the first such patch is
applied, never at ``import fi_patches``); a hot-path wrapper is a plain function with
``__wrapped__`` set (``functools.wraps``), which measures faster than wrapt's proxy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from fi_patches._logging import get_logger

logger = get_logger(__name__)


class Patch(Protocol):
    """One reversible change; ``revert`` restores the exact objects ``apply`` replaced."""

    def describe(self) -> str: ...

    def apply(self) -> None: ...

    def revert(self) -> None: ...


class PatchError(RuntimeError):
    """A patch could not be applied; nothing of its set stays applied."""


class PatchSet:
    """Applies ``patches`` in order; on any failure reverts those already applied."""

    def __init__(self, patches: Sequence[Patch]) -> None:
        self.patches = tuple(patches)
        self.applied = False

    def apply(self) -> None:
        if self.applied:
            return
        done: list[Patch] = []
        for patch in self.patches:
            try:
                patch.apply()
            except Exception as exc:
                for undo in reversed(done):
                    try:
                        undo.revert()
                    except Exception:
                        logger.exception(
                            "could not revert %s after a failed apply", undo.describe()
                        )
                raise PatchError(
                    f"cannot patch {patch.describe()}: {type(exc).__name__}: {exc}"
                ) from exc
            done.append(patch)
        self.applied = True

    def revert(self) -> None:
        if not self.applied:
            return
        for patch in reversed(self.patches):
            try:
                patch.revert()
            except Exception:
                logger.exception("could not revert %s", patch.describe())
        self.applied = False


class Gate(Protocol):
    """What a replacement consults on every call: False once its patch is reverted."""

    active: bool


Replacement = Callable[[Any, Gate], Callable[..., Any]]
"""Builds the replacement from the original function and its patch's gate. On a hot path it
is a plain function (one Python frame, no per-access binding object) with ``__wrapped__`` set
to the original (``functools.wraps``) that calls the original unchanged when ``gate.active`` is
False: if something else wrapped the attribute after us and revert had to leave it in place,
our layer is then a pass-through. Off the hot path, :func:`proxied` builds it."""

ProxyWrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]
"""wrapt's wrapper form: ``wrapper(wrapped, instance, args, kwargs)``."""


def proxied(wrapper: ProxyWrapper) -> Replacement:
    """The replacement that installs ``wrapt.FunctionWrapper(original, wrapper)``, enabled while
    its patch is applied (a pass-through once reverted, when something else wrapped the
    attribute after us). Its ``__wrapped__`` is the original; wrapt is imported here, when the
    patch is applied."""

    def make(original: Any, gate: Gate) -> Any:
        import wrapt

        return wrapt.FunctionWrapper(original, wrapper, enabled=lambda: gate.active)

    return make


def unwrap_own(found: Any, ours: Callable[[Any], bool]) -> Any:
    """What ``found`` wraps past the first wrapper of fi_patches' on its ``__wrapped__`` chain
    (``ours(f)`` tells), or ``found`` itself when the chain holds none: a wrapper someone else
    put over ours is seen through, FlashInfer's own decorators are not."""
    import inspect

    if ours(found):
        return found.__wrapped__
    try:
        mine = inspect.unwrap(found, stop=ours)
    except ValueError:  # a __wrapped__ cycle: nothing of ours is reachable
        return found
    return mine.__wrapped__ if mine is not found and ours(mine) else found


class AttributePatch:
    """Replaces ``owner.name`` (a module or class attribute) with ``make(original, self)``.

    The original is read from ``owner.__dict__`` so a class's plain function, not a bound
    method, is kept and put back. If something else replaced the attribute after us, revert
    leaves that object in place and our layer turns into a pass-through.
    """

    def __init__(self, owner: Any, name: str, make: Replacement) -> None:
        self.owner = owner
        self.name = name
        self.make = make
        self.active = False
        self._original: Any = None
        self._installed: Any = None

    def describe(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", "?")
        module = getattr(self.owner, "__module__", None)
        prefix = f"{module}." if module and module != owner else ""
        return f"{prefix}{owner}.{self.name}"

    def apply(self) -> None:
        if self.active:
            return
        namespace = vars(self.owner)
        if self.name not in namespace:
            raise AttributeError(f"{self.describe()} is not defined on {self.owner!r} itself")
        self._original = namespace[self.name]
        self._installed = self.make(self._original, self)
        setattr(self.owner, self.name, self._installed)
        self.active = True

    def revert(self) -> None:
        if not self.active:
            return
        self.active = False
        current = vars(self.owner).get(self.name)
        if current is self._installed:
            setattr(self.owner, self.name, self._original)
        else:
            logger.warning(
                "%s was replaced by another patch after fi_patches wrapped it; leaving it in place "
                "(the fi_patches layer inside it is now a pass-through)",
                self.describe(),
            )
        self._installed = None
