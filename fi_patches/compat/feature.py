"""A feature's declaration, in the manner of OpenTelemetry's ``_instruments``: the package it
patches (whose verified releases it inherits), the devices it runs on, the pin-table sections it
applies and the runners it pins, how a table's entries are checked, and its behavioural
self-check. The internals it needs are not listed here: each internal names the features that
need it (:mod:`fi_patches.internals`), so there is one list to keep."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet

from fi_patches.internals import Declared, Dependency

if TYPE_CHECKING:
    from fi_patches.compat.device import Device
    from fi_patches.pinning.targets import PinnedRunner

SelfCheck = Callable[["Device"], "str | None"]
"""Takes the target device; None when the patched package behaves as the feature needs, else
the reason it does not."""


def load(path: str) -> Any:
    """The object at ``module:name``, imported now (declarations stay cheap to import)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Feature:
    """What one fi_patches feature needs and owns."""

    name: str
    summary: str
    requires: Dependency
    devices: tuple[str, ...]
    self_check: str
    """``module:function`` of the :data:`SelfCheck`, imported only when it runs."""
    sections: tuple[str, ...] = ()
    """The pin-table sections this feature applies."""
    runners: tuple[PinnedRunner, ...] = ()
    """FlashInfer's runner classes whose tactics it pins (and whose cached winners the
    tuner-cache wrapper inspects)."""
    checker: str = ""
    """``module:function`` checking this feature's sections of a table against the installed
    release (a list of ``PinProblem``), imported only when a table is checked."""
    recorded: tuple[tuple[str, str, str], ...] = ()
    """``(custom op, runner class, section)`` of tuned runners whose cached winners ``pins
    record`` turns into this feature's pins, besides :attr:`runners`."""

    @property
    def verified(self) -> SpecifierSet:
        """The releases of :attr:`requires` this feature is verified on."""
        return self.requires.verified

    def internals(self) -> tuple[Declared, ...]:
        """The internals this feature needs, in declaration order."""
        from fi_patches.internals import needed_by

        return needed_by(self.name)

    def load_self_check(self) -> SelfCheck:
        check: SelfCheck = load(self.self_check)
        return check
