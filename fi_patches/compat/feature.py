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
class Requirement:
    """Another distribution a feature needs besides FlashInfer (vLLM): the releases it is
    verified on and the internals probed in it, checked as FlashInfer's are.

    INTERIM (issue 13): the Feature redesign makes every dependency, FlashInfer included, one of
    these; until then ``Feature.requires`` lists the extra ones.
    """

    distribution: str
    """The name pip knows (``vllm``); its version is read from the installed metadata."""
    module: str
    """The import name, looked up with ``find_spec`` (nothing is imported to find it)."""
    label: str
    """How reasons name it (``vLLM``)."""
    verified: SpecifierSet
    probes: tuple[Probe, ...] = ()


@dataclass(frozen=True)
class Feature:
    """What one fi_patches feature needs from FlashInfer and the device."""

    name: str
    summary: str
    verified: SpecifierSet
    devices: tuple[str, ...]
    """The target archs it runs on; empty for a feature that needs no particular device (it is
    then never asked for one, so checking it initializes no CUDA context)."""
    probes: tuple[Probe, ...]
    self_check: str
    """``module:function`` of the :data:`SelfCheck`, imported only when it runs."""
    requires: tuple[Requirement, ...] = ()
    """Other distributions it needs, checked before FlashInfer (INTERIM, see Requirement)."""
    uses_flashinfer: bool = True
    """False for a feature that touches no FlashInfer internal (the vLLM plugin): FlashInfer is
    then neither imported nor checked, and ``verified`` and ``probes`` are unused."""

    def load_self_check(self) -> SelfCheck:
        import importlib

        module, _, function = self.self_check.partition(":")
        check: SelfCheck = getattr(importlib.import_module(module), function)
        return check
