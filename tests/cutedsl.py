"""Helpers around FlashInfer's real cute-dsl MXFP8 runner for the tests."""

from __future__ import annotations

from typing import Any

import torch

from fi_patches.pins import PinTable
from fi_patches.pins.keys import as_tactic as nested_tuple
from tests.mxfp8_inputs import Mxfp8Problem

CLASS = "CuteDSLMxfp8GemmRunner"


def runner() -> Any:
    from fi_patches.cute_dsl import cute_dsl_runner

    return cute_dsl_runner(10, 3, torch.bfloat16)


def stock(n: int, k: int, rows: int) -> list[Any]:
    """The runner's own list (call outside any pins)."""
    return [
        nested_tuple(t)
        for t in runner().get_valid_tactics(Mxfp8Problem(n, k, rows).runner_inputs(), None)
    ]


def as_toml(tactic: Any) -> Any:
    return [as_toml(p) for p in tactic] if isinstance(tactic, tuple) else tactic


def table(*entries: dict[str, Any], source: str = "<test>") -> PinTable:
    return PinTable.from_mapping(
        {"meta": {"device": "sm_103", "flashinfer": ">=0.7.0"}, "cute_dsl": list(entries)},
        source=source,
    )


def entry(n: int, k: int, lo: int, hi: int, tactic: Any) -> dict[str, Any]:
    return {"n": n, "k": k, "min_rows": lo, "max_rows": hi, "tactic": as_toml(tactic)}


def cached(tuner: Any, n: int, k: int) -> dict[int, Any]:
    """The tuner's cached cute-dsl winners for weight ``(n, k)``: bucket rows -> tactic."""
    found = {}
    for key, value in tuner.profiling_cache.items():
        if key.runner_class_name == CLASS and tuple(key.nearest_profile[1]) == (k, n):
            found[int(key.nearest_profile[0][0])] = nested_tuple(value[0])
    return found


def record_forward(monkeypatch: Any) -> list[dict[str, Any]]:
    """Record ``(tactic, workspace)`` of each call of a cute-dsl runner (then run FlashInfer's
    forward, which fails at the CPU launch). The spy sits on ``TunableRunner.__call__``, which
    every runner class inherits: before 0.7.4 each ``mm_mxfp8`` call builds a new class."""
    from flashinfer.autotuner import TunableRunner

    calls: list[dict[str, Any]] = []
    original = TunableRunner.__call__

    def call(self: Any, inputs: Any, **kwargs: Any) -> Any:
        if type(self).__name__ == CLASS:
            calls.append({"tactic": nested_tuple(kwargs.get("tactic")), "workspace": inputs[6]})
        return original(self, inputs, **kwargs)

    monkeypatch.setattr(TunableRunner, "__call__", call)
    return calls


def served(tuner: Any, n: int, k: int, rows: int) -> Any:
    """The tactic FlashInfer's own cache lookup serves for the cute-dsl runner at ``rows`` rows
    of weight ``(n, k)`` outside tuning, or None on a miss."""
    from flashinfer.gemm import gemm_base

    inputs = Mxfp8Problem(n, k, rows).runner_inputs(gemm_base.DEFAULT_WORKSPACE_SIZE)
    shapes = tuple(tuner._get_input_sizes(inputs))
    hit, _, tactic, _ = tuner.search_cache(
        "mxfp8_gemm", [runner()], shapes, gemm_base._MM_MXFP8_CUTE_DSL_TUNING_CONFIG, inputs=inputs
    )
    return nested_tuple(tactic) if hit else None
