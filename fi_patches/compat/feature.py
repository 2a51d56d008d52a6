"""A feature's declaration, in the manner of OpenTelemetry's ``_instruments``: the package it
patches (whose verified releases it inherits), the devices it runs on, the pin-table sections it
applies, how a table's entries are checked, and its behavioural
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
    requires: tuple[Dependency, ...]
    """The packages it patches, the first the one it is mainly about (its verified range is
    the feature's); their internals it needs name this feature."""
    devices: tuple[str, ...]
    """The target archs it runs on; empty for a feature that needs no particular device (it
    is then never asked for one, so judging it initializes no CUDA context)."""
    self_check: str
    """``module:function`` of the :data:`SelfCheck`, imported only when it runs. It is cheap
    (tactic lists, cache lookups) and runs in every process, so a FlashInfer patched in memory
    by another library is judged as it is here."""
    sections: tuple[str, ...] = ()
    """The pin-table sections this feature applies (how each pins FlashInfer's tuner is its
    specialization, :mod:`fi_patches.pinning.index`)."""
    checker: str = ""
    """``module:function`` checking this feature's sections of a table against the installed
    release (a list of ``PinProblem``), imported only when a table is checked."""
    compiled_check: str = ""
    """``module:function`` of an expensive :data:`SelfCheck` (a kernel compile), run after
    ``self_check`` passes; its outcome is kept on disk (:mod:`fi_patches.compat.selfcheck_cache`)
    keyed also by the source files of the modules this feature's internals live in."""

    @property
    def verified(self) -> SpecifierSet:
        """The releases of its main package this feature is verified on."""
        return self.requires[0].verified

    def internals(self) -> tuple[Declared, ...]:
        """The internals this feature needs, in declaration order."""
        from fi_patches.internals import needed_by

        return needed_by(self.name)

    def load_self_check(self) -> SelfCheck:
        check: SelfCheck = load(self.self_check)
        return check

    def load_compiled_check(self) -> SelfCheck:
        check: SelfCheck = load(self.compiled_check)
        return check
