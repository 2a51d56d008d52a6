"""A group of patches that applies fully or not at all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
