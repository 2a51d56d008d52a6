"""Replace one attribute with a wrapper and put the exact original object back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fi_patches._logging import get_logger

logger = get_logger(__name__)


class Gate(Protocol):
    """What a replacement consults on every call: False once its patch is reverted."""

    active: bool


Replacement = Callable[[Any, Gate], Callable[..., Any]]
"""Builds the replacement from the original function and its patch's gate. On a hot path it
is a plain function (one Python frame, no per-access binding object) that calls the original
unchanged when ``gate.active`` is False: if something else wrapped the attribute after us and
revert had to leave it in place, our layer is then a pass-through."""


class AttributePatch:
    """Replaces ``owner.name`` (a module or class attribute) with ``make(original)``.

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
