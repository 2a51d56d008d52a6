"""The boundary: every internal fi_patches uses from another package, declared once with the
probe that guards it and the features that need it (``tuner.py``: FlashInfer's tuner contract
and its caches' file forms, which pinning and recording any op need; ``flashinfer.py``: the
MXFP8 internals; ``cute_dsl.py``: the CuTe DSL's, which the wide kernel and its FlashInfer base
class use; ``tune_group.py``; ``vllm.py``; ``sglang.py``), and what FlashInfer's sources say
(``catalog.py``: its runner classes and the op names it tunes). No other
module of fi_patches imports FlashInfer or names one of its private members, and only the DSL
kernel module imports the DSL; ``tests/test_boundary.py`` checks that, and the drift suite
(``tests/drift/``) breaks each declared internal in turn."""

from __future__ import annotations

from fi_patches.internals._declare import (
    Declared,
    Dependency,
    Internal,
    InternalError,
    OneOf,
)

__all__ = [
    "Declared",
    "Dependency",
    "Internal",
    "InternalError",
    "OneOf",
    "absence",
    "declared",
    "modules_of",
    "needed_by",
]


def declared() -> tuple[Declared, ...]:
    """Every declared internal, of every dependency (declarations import nothing heavy)."""
    from fi_patches.internals import cute_dsl, flashinfer, sglang, tune_group, tuner, vllm

    return (
        tuner.INTERNALS
        + flashinfer.INTERNALS
        + cute_dsl.INTERNALS
        + tune_group.INTERNALS
        + vllm.INTERNALS
        + sglang.INTERNALS
    )


def absence(internal: Declared) -> str:
    """Why ``internal`` does not resolve here, as a clause: its package is not installed
    (``vLLM is not installed``), else the path that is not there in this release."""
    from fi_patches.internals import cute_dsl, flashinfer, sglang, vllm

    module = (internal.options[0] if isinstance(internal, OneOf) else internal).module
    top = module.partition(".")[0]
    for dependency in (flashinfer.FLASHINFER, cute_dsl.CUTE_DSL, vllm.VLLM, sglang.SGLANG):
        if dependency.module == top and not dependency.installed():
            return f"{dependency.label} is not installed here, so {internal.path} is not there"
    if isinstance(internal, OneOf):
        return f"none of {internal.path} is there"
    return f"{internal.path} is not there"


def needed_by(feature: str) -> tuple[Declared, ...]:
    """The internals ``feature`` declares it needs, in declaration order."""
    return tuple(i for i in declared() if feature in i.features)


def modules_of(feature: str) -> tuple[str, ...]:
    """The modules of every internal ``feature`` needs (each option of a ``OneOf``), sorted: the
    source files a cached self-check outcome of it is keyed by."""
    found: set[str] = set()
    for internal in needed_by(feature):
        options = internal.options if isinstance(internal, OneOf) else (internal,)
        found.update(option.module for option in options)
    return tuple(sorted(found))
