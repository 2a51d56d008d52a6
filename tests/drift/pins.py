"""The pin table every drift case uses, made once per run from the unbroken FlashInfer (in a
fork of the zygote, before any case): valid there for every section, so a case's table is valid
for whichever features it leaves enabled."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

from tests.drift.child import ENV, PINNED_ROWS, K, N, as_json, offered


def make_table(path: Path) -> dict[str, Any]:
    """Write a pin table valid on the unbroken FlashInfer (simulated sm_103) to ``path``: a
    low-latency pin for 5..8 rows, a wide pin for tile 32 and a cute-dsl pin for 65..128 rows,
    each a tactic FlashInfer (or the wide enumerator) lists, but not its default."""
    os.environ.update(ENV)
    import pytest
    import torch

    from tests import simulation
    from tests.mxfp8_inputs import Mxfp8Problem

    simulation.install(pytest.MonkeyPatch())
    low_latency = [t for t in offered()["value"][1:] if t[3] == 1]
    gemm_base = importlib.import_module("flashinfer.gemm.gemm_base")
    cute_runner = gemm_base._cute_dsl_gemm_mxfp8_runner(10, 3, True, torch.bfloat16)
    cute = [
        t
        for t in as_json(
            cute_runner.get_valid_tactics(Mxfp8Problem(N, K, 128).runner_inputs(), None)
        )[2:]
        if t[4] == 1
    ]
    from fi_patches.wide.tactics import wide_tactics

    wide = as_json(wide_tactics(N, K, 32)[1])
    table = {
        "meta": {"device": "sm_103", "flashinfer": ">=0.7.0", "note": "drift suite"},
        "low_latency": [
            {"n": N, "k": K, "min_rows": 5, "max_rows": PINNED_ROWS, "tactic": low_latency[0]}
        ],
        "wide": [{"n": N, "k": K, "tile": 32, "tactic": wide}],
        "cute_dsl": [{"n": N, "k": K, "min_rows": 65, "max_rows": 128, "tactic": cute[1]}],
    }
    path.write_text(json.dumps(table, indent=2), encoding="utf-8")
    return table
