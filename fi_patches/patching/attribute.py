"""Replace one attribute with a wrapt ``FunctionWrapper`` and put the original object back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wrapt

from fi_patches._logging import get_logger

logger = get_logger(__name__)

Wrapper = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]
"""wrapt's wrapper signature: ``(wrapped, instance, args, kwargs)``."""


class AttributePatch:
    """Wraps ``owner.name`` (a module or class attribute) with ``wrapper``.

    The original is read from ``owner.__dict__`` so a class's plain function, not a bound
    method, is kept and put back. If something else replaced the attribute after us, revert
    leaves that object in place and our wrapper turns into a pass-through.
    """

    def __init__(self, owner: Any, name: str, wrapper: Wrapper) -> None:
        self.owner = owner
        self.name = name
        self.wrapper = wrapper
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

        def gate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if not self.active:
                return wrapped(*args, **kwargs)
            return self.wrapper(wrapped, instance, args, kwargs)

        self._installed = wrapt.FunctionWrapper(self._original, gate)
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
                "(the fi_patches wrapper inside it is now a pass-through)",
                self.describe(),
            )
        self._installed = None
