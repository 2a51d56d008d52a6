"""Fixtures of the vLLM tests: the pins of ``tests/test_mxfp8_mm.py``'s routes, registered as
the default table, and vLLM's kernel with fi_patches' route installed (and removed after)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fi_patches import refresh
from fi_patches.pins import PinTable
from fi_patches.pins.table import register_pins
from tests import cutedsl
from tests.conftest import require_feature
from tests.vllm import layers

N, K = layers.N, layers.K


@pytest.fixture
def table(simulated: Any) -> PinTable:
    """Wide pins for tiles 16-48 and cute-dsl pins for 33-128 rows, as the default table, on
    the simulated sm_103 with every route's feature enabled."""
    from fi_patches.wide.tactics import wide_tactics

    refresh()
    for name in ("pinned_tactics", "pinned_cute_dsl", "wide_tile"):
        require_feature(name)
    cute = [t for t in cutedsl.stock(N, K, 128)[2:] if t[4] == 1]
    pins = PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
            "wide": [
                {"n": N, "k": K, "tile": t, "tactic": list(wide_tactics(N, K, t)[1])}
                for t in (16, 32, 48)
            ],
            "cute_dsl": [
                cutedsl.entry(N, K, 33, 64, cute[0]),
                cutedsl.entry(N, K, 65, 128, cute[1]),
            ],
        }
    )
    register_pins(pins)
    return pins


@pytest.fixture
def original() -> Any:
    """vLLM's own ``apply_weights``, as its class holds it before the route."""
    cls = layers.kernel_class()
    method = vars(cls)["apply_weights"]
    assert method.__module__ == layers.KERNEL_MODULE, "a test left the route installed"
    return method


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch, original: Any) -> Iterator[layers.Linear]:
    """vLLM's kernel and layer with the route installed; afterwards the exact original is back."""
    from fi_patches.vllm import route

    assert route.arm().startswith("routing FlashInferCutedslMxfp8LinearKernel through")
    try:
        yield layers.linear(monkeypatch)
    finally:
        route.remove()
        assert vars(layers.kernel_class())["apply_weights"] is original
