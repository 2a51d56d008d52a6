"""What the environment the suite runs in expects of each feature, from ``compat/matrix.toml``.

A compat-matrix cell names itself to its test run through ``FI_COMPAT_CELL`` (set by
``compat/cell.py``); elsewhere the environment is the README's (FlashInfer 0.7.4 on CPU,
FI_PATCHES_DEVICE=sm_103), declared by the matrix's cell of the installed release. The
feature-gated helpers in ``conftest.py`` skip only where this says the feature may be disabled,
and fail, with the compat layer's reason, where it says enabled: a bug of ours that disables a
feature fails its tests instead of turning them into skips."""

from __future__ import annotations

import os
from functools import lru_cache

from compat.cell import CELL_ENV
from compat.matrix import DEVICE_REASON, Cell, Expectation, Matrix, load


@lru_cache(maxsize=1)
def matrix() -> Matrix:
    return load()


def environment_cell() -> tuple[Cell | None, str]:
    """The matrix cell this run is, and how it was found (or why none was)."""
    named = os.environ.get(CELL_ENV)
    if named:
        try:
            return matrix().cell(named), f"{CELL_ENV}={named}"
        except KeyError:
            return None, f"{CELL_ENV}={named} names no cell of compat/matrix.toml"
    from fi_patches.compat.features import installed_flashinfer

    version = installed_flashinfer().version
    listed = matrix().listed_as(str(version)) if version is not None else None
    for cell in matrix().cells:
        if cell.flashinfer == listed and not cell.dsl and not cell.simulate_import:
            return cell, f"FlashInfer {version} installed (the matrix's cell {cell.id!r})"
    return None, (
        f"FlashInfer {version} is installed and no cell of compat/matrix.toml declares it "
        f"(the README's test environment is FlashInfer 0.7.4; a matrix cell sets {CELL_ENV})"
    )


def expectation(name: str) -> Expectation | None:
    """What this environment expects of feature ``name`` (None: it declares nothing)."""
    cell, _ = environment_cell()
    return None if cell is None else cell.expect.get(name)


def where() -> str:
    return environment_cell()[1]


def expects_enabled(name: str) -> bool:
    """Whether this environment expects ``name`` enabled (no disabled outcome allowed)."""
    expected = expectation(name)
    return expected is not None and "disabled" not in expected.states


def disabled_is_expected(name: str, reason: str) -> str | None:
    """None when feature ``name`` disabled for ``reason`` is what this environment expects
    (or it declares nothing, or the reason is the device a test chose); else why not."""
    expected = expectation(name)
    if expected is None or DEVICE_REASON.search(reason):
        return None
    if expected.match(False, reason) is not None:
        return None
    return (
        f"{name} is disabled here ({reason}) but compat/matrix.toml expects "
        f"{expected.describe()} ({where()})"
    )


def release_is_expected_to_support(name: str) -> bool:
    """Whether this environment expects the installed release to support ``name`` (verified
    range, every internal): its expectation allows enabled, or disabled only by the self-check
    (which runs after the probes and the range passed)."""
    expected = expectation(name)
    if expected is None:
        return False
    return all(o.state == "enabled" or "self-check failed" in o.reason for o in expected.outcomes)
