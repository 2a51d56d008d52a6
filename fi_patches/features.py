"""Every fi_patches feature, declared once each, in the order ``doctor`` lists them.

Validation, ``pins record``, the tuner-cache wrapper, ``pinned_tactics()`` and the installed
wrappers iterate over these declarations; adding a runner or a section is a change here (and its
internals in :mod:`fi_patches.internals`).

Each is a :class:`Feature`, in the manner of OpenTelemetry's ``_instruments``: the package it
patches (whose verified releases it inherits), the devices it runs on, the pin-table sections it
applies, how a table's entries are checked, and its behavioural self-check. The internals it
needs are not listed here: each internal names the features that need it
(:mod:`fi_patches.internals`), so there is one list to keep."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet

from fi_patches import internals as declared_in
from fi_patches.internals import CUTE_DSL, SGLANG, VLLM, Declared, Dependency
from fi_patches.internals import PINNED_OPS as PINNED_OPS_NAME
from fi_patches.internals import flashinfer as fi

if TYPE_CHECKING:
    from fi_patches.compat.target import Device

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


PINNED_OPS = Feature(
    name=PINNED_OPS_NAME,
    summary="any op FlashInfer tunes is offered only its pinned tactic per tuner key ([[pin]])",
    requires=(fi.FLASHINFER,),
    devices=(),
    self_check="fi_patches.pinning.validate:pinned_ops",
    sections=("pin",),
    checker="fi_patches.pinning.validate:check_pins",
)

PINNED_TACTICS = Feature(
    name=fi.PINNED_TACTICS,
    summary=(
        "FlashInfer's low-latency MXFP8 tuner is offered only the pinned tactic per shape and rows"
    ),
    requires=(fi.FLASHINFER, CUTE_DSL),  # FlashInfer's CuTe DSL kernels
    devices=("sm_100", "sm_103", "sm_107"),
    self_check="fi_patches.pinning.validate:pinned_tactics",
    sections=("low_latency",),
    checker="fi_patches.pinning.validate:check_low_latency",
)

PINNED_CUTE_DSL = Feature(
    name=fi.PINNED_CUTE_DSL,
    summary="mm_mxfp8's cute-dsl runner runs (and tunes) a pinned tactic per shape and row range",
    requires=(fi.FLASHINFER, CUTE_DSL),  # FlashInfer's CuTe DSL kernels
    # sm_107 runs another cute-dsl kernel with another tactic form from 0.7.2 on.
    devices=("sm_100", "sm_103"),
    self_check="fi_patches.pinning.validate:pinned_cute_dsl",
    sections=("cute_dsl",),
    checker="fi_patches.pinning.validate:check_cute_dsl",
)

WIDE_TILE = Feature(
    name=fi.WIDE_TILE,
    summary="the low-latency MXFP8 GEMM with 16-128-row activation tiles, compiled by fi_patches",
    requires=(fi.FLASHINFER, CUTE_DSL),  # FlashInfer's CuTe DSL kernels
    devices=("sm_100", "sm_103"),
    self_check="fi_patches.pinning.validate:wide_tile",
    sections=("wide",),
    checker="fi_patches.pinning.validate:check_wide",
    compiled_check="fi_patches.pinning.validate:wide_tile_compiled",
)

PRESEED = Feature(
    name=fi.PRESEED,
    summary=(
        "pinned_tactics(mode='preseed') answers FlashInfer's cache lookups of pinned keys with "
        "the pin, so tuning a pinned key profiles nothing"
    ),
    requires=(fi.FLASHINFER,),
    devices=(),
    self_check="fi_patches.pinning.validate:preseed",
)

VLLM_PLUGIN = Feature(
    name=declared_in.VLLM_PLUGIN,
    summary="vLLM's general plugin activates fi_patches (FI_PATCHES_PINS) in every vLLM process",
    requires=(VLLM,),
    devices=declared_in.VLLM_PLUGIN_DEVICES,
    self_check="fi_patches.vllm.plugin:plugin_self_check",
)

VLLM_ROUTE = Feature(
    name=declared_in.VLLM_ROUTE,
    summary="vLLM's cute-dsl MXFP8 linears send their GEMM through fi_patches.mxfp8.mm",
    # fi_patches.mxfp8.mm's own routes gate their FlashInfer internals; FlashInfer's verified
    # range is the one the route's call of it is verified on.
    requires=(VLLM, fi.FLASHINFER),
    devices=declared_in.VLLM_ROUTE_DEVICES,
    self_check="fi_patches.vllm.route:route_self_check",
)

SGLANG_PLUGIN = Feature(
    name=declared_in.SGLANG_PLUGIN,
    summary=(
        "SGLang's general plugin activates fi_patches (FI_PATCHES_PINS) in every SGLang process"
    ),
    requires=(SGLANG,),
    devices=declared_in.SGLANG_PLUGIN_DEVICES,
    self_check="fi_patches.sglang.plugin:plugin_self_check",
)

FEATURES: tuple[Feature, ...] = (
    PINNED_OPS,
    PINNED_TACTICS,
    PINNED_CUTE_DSL,
    WIDE_TILE,
    PRESEED,
    VLLM_PLUGIN,
    VLLM_ROUTE,
    SGLANG_PLUGIN,
)


def feature(name: str) -> Feature:
    """The feature called ``name``; ``KeyError`` names the known ones otherwise."""
    for declared in FEATURES:
        if declared.name == name:
            return declared
    known = ", ".join(f.name for f in FEATURES)
    raise KeyError(f"no fi_patches feature {name!r} (known: {known})")


def feature_of_section(section: str) -> Feature:
    """The feature that applies pin-table ``section``."""
    for declared in FEATURES:
        if section in declared.sections:
            return declared
    raise KeyError(f"no fi_patches feature applies [[{section}]] pins")


def pinned_sections() -> tuple[str, ...]:
    """Every section a ``pinned_tactics()`` block applies, in feature order."""
    return tuple(s for f in FEATURES for s in f.sections)
