"""A feature's declaration, in the manner of OpenTelemetry's ``_instruments``: the FlashInfer
releases it is verified on, the devices it runs on, the internals it needs, and where its
behavioural self-check lives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from fi_patches.compat.device import Device
from fi_patches.compat.probes import Probe

# A self-check takes the target device and returns None when the patched FlashInfer behaves as
# the feature needs, else the reason it does not.
SelfCheck = Callable[[Device], "str | None"]


@dataclass(frozen=True)
class Feature:
    """What one fi_patches feature needs from FlashInfer and the device."""

    name: str
    summary: str
    verified: SpecifierSet
    devices: tuple[str, ...]
    probes: tuple[Probe, ...]
    self_check: str
    """``module:function`` of the :data:`SelfCheck`, imported only when it runs."""

    def load_self_check(self) -> SelfCheck:
        import importlib

        module, _, function = self.self_check.partition(":")
        check: SelfCheck = getattr(importlib.import_module(module), function)
        return check
