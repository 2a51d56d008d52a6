"""The pin table every drift case uses, made once per run from the unbroken FlashInfer (in a
fork of the zygote, before any case): valid there for every section, so a case's table is valid
for whichever features it leaves enabled."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from tests.drift.child import PINNED_ROWS, K, N, as_json, offered, set_environment, simulate


def _low_latency() -> list[dict[str, Any]]:
    tactics = [t for t in offered()["value"][1:] if t[3] == 1]
    return [{"n": N, "k": K, "min_rows": 5, "max_rows": PINNED_ROWS, "tactic": tactics[0]}]


def _wide() -> list[dict[str, Any]]:
    from fi_patches.pinning.validate import WIDE_CHECK_TILE
    from fi_patches.wide.tactics import wide_tactics

    # The kernel the wide_tile self-check compiles (its tile, the weight's first tactic), so
    # the mm phase's wide call is served from the compile the doctor phase made: one compile a
    # case, not two (the wide route needs the pin either way, so the route shows it took effect).
    tile = WIDE_CHECK_TILE
    return [{"n": N, "k": K, "tile": tile, "tactic": as_json(wide_tactics(N, K, tile)[0])}]


def _cute_dsl() -> list[dict[str, Any]]:
    import torch

    from tests.mxfp8_inputs import Mxfp8Problem

    gemm_base = importlib.import_module("flashinfer.gemm.gemm_base")
    runner = gemm_base._cute_dsl_gemm_mxfp8_runner(10, 3, True, torch.bfloat16)
    listed = as_json(runner.get_valid_tactics(Mxfp8Problem(N, K, 128).runner_inputs(), None))
    tactics = [t for t in listed[2:] if t[4] == 1]
    return [{"n": N, "k": K, "min_rows": 65, "max_rows": 128, "tactic": tactics[1]}]


def make_table(path: Path) -> dict[str, Any]:
    """Write a pin table valid on the unbroken FlashInfer (simulated sm_103) to ``path``: a
    low-latency pin for 5..8 rows, a wide pin for the self-check's tile and a cute-dsl pin for
    65..128 rows, each a tactic FlashInfer (or the wide enumerator) lists; the low-latency and
    cute-dsl pins are not FlashInfer's default. A section this release cannot list (an old
    release without the runner) is left out, with the reason."""
    set_environment()
    simulate()
    table: dict[str, Any] = {
        "meta": {"device": "sm_103", "flashinfer": ">=0.7.0", "note": "drift suite"}
    }
    left_out = {}
    for section, entries in (
        ("low_latency", _low_latency),
        ("wide", _wide),
        ("cute_dsl", _cute_dsl),
    ):
        try:
            table[section] = entries()
        except Exception as exc:
            left_out[section] = f"{type(exc).__name__}: {exc}"[:300]
    path.write_text(json.dumps(table, indent=2), encoding="utf-8")
    return {**table, "left_out": left_out}
