"""Every fi_patches feature, declared once each, in the order ``doctor`` lists them.

Validation, ``pins record``, the tuner-cache wrapper, ``pinned_tactics()`` and the installed
wrappers iterate over these declarations; adding a runner or a section is a change here (and its
internals in :mod:`fi_patches.internals`)."""

from __future__ import annotations

from fi_patches.compat.feature import Feature
from fi_patches.internals import PINNED_OPS as PINNED_OPS_NAME
from fi_patches.internals import flashinfer as fi
from fi_patches.internals import sglang as sg
from fi_patches.internals import vllm as vl
from fi_patches.internals.cute_dsl import CUTE_DSL

PINNED_OPS = Feature(
    name=PINNED_OPS_NAME,
    summary="any op FlashInfer tunes is offered only its pinned tactic per tuner key ([[pin]])",
    requires=(fi.FLASHINFER,),
    devices=(),
    self_check="fi_patches.self_checks:pinned_ops",
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
    self_check="fi_patches.self_checks:pinned_tactics",
    sections=("low_latency",),
    checker="fi_patches.pinning.validate:check_low_latency",
)

PINNED_CUTE_DSL = Feature(
    name=fi.PINNED_CUTE_DSL,
    summary="mm_mxfp8's cute-dsl runner runs (and tunes) a pinned tactic per shape and row range",
    requires=(fi.FLASHINFER, CUTE_DSL),  # FlashInfer's CuTe DSL kernels
    # sm_107 runs another cute-dsl kernel with another tactic form from 0.7.2 on.
    devices=("sm_100", "sm_103"),
    self_check="fi_patches.self_checks:pinned_cute_dsl",
    sections=("cute_dsl",),
    checker="fi_patches.pinning.validate:check_cute_dsl",
)

WIDE_TILE = Feature(
    name=fi.WIDE_TILE,
    summary="the low-latency MXFP8 GEMM with 16-128-row activation tiles, compiled by fi_patches",
    requires=(fi.FLASHINFER, CUTE_DSL),  # FlashInfer's CuTe DSL kernels
    devices=("sm_100", "sm_103"),
    self_check="fi_patches.self_checks:wide_tile",
    sections=("wide",),
    checker="fi_patches.pinning.validate:check_wide",
    compiled_check="fi_patches.self_checks:wide_tile_compiled",
)

PRESEED = Feature(
    name=fi.PRESEED,
    summary=(
        "pinned_tactics(mode='preseed') answers FlashInfer's cache lookups of pinned keys with "
        "the pin, so tuning a pinned key profiles nothing"
    ),
    requires=(fi.FLASHINFER,),
    devices=(),
    self_check="fi_patches.self_checks:preseed",
)

VLLM_PLUGIN = Feature(
    name=vl.PLUGIN,
    summary="vLLM's general plugin activates fi_patches (FI_PATCHES_PINS) in every vLLM process",
    requires=(vl.VLLM,),
    devices=vl.PLUGIN_DEVICES,
    self_check="fi_patches.vllm.self_check:plugin_self_check",
)

VLLM_ROUTE = Feature(
    name=vl.ROUTE,
    summary="vLLM's cute-dsl MXFP8 linears send their GEMM through fi_patches.mxfp8.mm",
    # fi_patches.mxfp8.mm's own routes gate their FlashInfer internals; FlashInfer's verified
    # range is the one the route's call of it is verified on.
    requires=(vl.VLLM, fi.FLASHINFER),
    devices=vl.ROUTE_DEVICES,
    self_check="fi_patches.vllm.self_check:route_self_check",
)

SGLANG_PLUGIN = Feature(
    name=sg.PLUGIN,
    summary=(
        "SGLang's general plugin activates fi_patches (FI_PATCHES_PINS) in every SGLang process"
    ),
    requires=(sg.SGLANG,),
    devices=sg.PLUGIN_DEVICES,
    self_check="fi_patches.sglang.self_check:plugin_self_check",
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
