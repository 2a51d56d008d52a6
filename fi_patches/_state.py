"""Process-wide activation state that modules below :mod:`fi_patches.activation` read or act on:
whether process-wide pins are requested, and the call that takes every patch off. Standard
library only, so the rank guard reaches ``disable()`` without importing what imports it."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the start-up hook imports this module at every start
if TYPE_CHECKING:
    from collections.abc import Callable

_requested = False
_disable: Callable[[], None] | None = None


def requested() -> bool:
    """Whether process-wide pins are requested (``fi_patches.auto``, ``enable()``)."""
    return _requested


def set_requested(on: bool) -> None:
    """Record whether process-wide pins are requested (:mod:`fi_patches.activation` only)."""
    global _requested
    _requested = on


def on_disable(callback: Callable[[], None]) -> None:
    """Make ``callback`` what :func:`disable` calls (the package registers ``disable()``)."""
    global _disable
    _disable = callback


def disable() -> None:
    """Take every fi_patches patch off, as ``fi_patches.disable()`` does."""
    if _disable is not None:
        _disable()
