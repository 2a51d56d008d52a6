"""A FlashInfer ``TunableRunner`` for the wide low-latency kernel, so ``flashinfer.autotune()`` and
``AutoTuner.choose_one`` tune wide tiles like any FlashInfer op, on ``mm_mxfp8``'s inputs.

Its tactics are ``(tile, cta_k, ab_stages, sfb_tmem_stages, split_k)``: the tile travels with
the tactic, so a cached winner is self-describing. It offers tactics for more than 8 and at
most ``max_rows`` rows, and ``validate_tactic`` (FlashInfer's runner contract) turns a cached
too-narrow tactic into a cache miss. ``[[wide]]`` pins narrow it as any pinned runner is
narrowed, through the engine (the section's specialization maps rows to this runner's tile).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from fi_patches._limits import LOW_LATENCY_MAX_ROWS, WIDE_OP, WIDE_RUNNER
from fi_patches._logging import get_logger, log_once
from fi_patches.wide.tactics import TILE_ROUNDING, WIDE_MAX_ROWS, pick_tile

logger = get_logger(__name__)

CLASS_NAME = WIDE_RUNNER
CUSTOM_OP = WIDE_OP

WideTactic = tuple[int, int, int, int, int]


def _problem(inputs: list[Any]) -> tuple[int, int, int]:
    a, b = inputs[0], inputs[1]
    return int(b.shape[1]), int(a.shape[1]), int(a.shape[0])


@functools.cache
def runner_class() -> type:
    """The runner class (built on first use: it derives from FlashInfer's ``TunableRunner``)."""
    import torch

    from fi_patches.internals import tuner as fi_tuner
    from fi_patches.wide.compile import compile_wide
    from fi_patches.wide.launch import launch_wide
    from fi_patches.wide.tactics import choose_tactic, wide_tactics

    class WideLowLatencyGemmRunner(fi_tuner.tunable_runner()):  # type: ignore[misc]
        """Wide low-latency MXFP8 GEMM tactics for ``mm_mxfp8``'s 7 inputs."""

        def __init__(
            self, pdl: bool = True, max_rows: int = WIDE_MAX_ROWS, rounding: int = TILE_ROUNDING
        ) -> None:
            self.pdl = pdl
            self.max_rows = max_rows
            self.rounding = rounding

        def serves(self, inputs: list[Any]) -> bool:
            out = inputs[5]
            rows = inputs[0].shape[0]
            return LOW_LATENCY_MAX_ROWS < rows <= self.max_rows and out.dtype == torch.bfloat16

        def tile_for(self, rows: int) -> int:
            return pick_tile(rows, rounding=self.rounding, max_rows=self.max_rows)

        def get_cache_key_extras(self, inputs: list[Any]) -> tuple[Any, ...]:
            return (str(inputs[5].dtype), self.pdl, self.max_rows, self.rounding)

        def get_valid_tactics(self, inputs: list[Any], profile: Any = None) -> list[WideTactic]:
            if not self.serves(inputs):
                return []
            n, k, rows = _problem(inputs)
            tile = self.tile_for(rows)
            return [(tile, *t) for t in wide_tactics(n, k, tile)]

        def validate_tactic(self, inputs: list[Any], tactic: Any) -> bool:
            """False for a cached tactic that is too narrow for these rows (FlashInfer then
            treats the entry as a miss)."""
            if not isinstance(tactic, (tuple, list)) or len(tactic) != 5:
                return False
            _, _, rows = _problem(inputs)
            return rows <= int(tactic[0])

        def precompile_tactics(
            self, inputs: list[Any], tactics: list[Any], profile: Any, **kwargs: Any
        ) -> bool:
            for tactic in tactics:
                compile_wide(int(tactic[0]), tuple(tactic[1:]), pdl=self.pdl)
            return True

        def _resolve(self, inputs: list[Any], tactic: Any) -> tuple[int, Any]:
            n, k, rows = _problem(inputs)
            if tactic is not None and tactic != -1 and self.validate_tactic(inputs, tactic):
                return int(tactic[0]), tuple(tactic[1:])
            if tactic is not None and tactic != -1:
                log_once(
                    logger,
                    logging.WARNING,
                    f"widefallback:{tactic}:{rows}",
                    "wide tactic %s cannot serve %d rows; running the default wide tactic",
                    tactic,
                    rows,
                )
            tile = self.tile_for(rows)
            return tile, choose_tactic(n, k, tile, rows)

        def forward(
            self, inputs: list[Any], tactic: Any = -1, do_preparation: bool = False, **kwargs: Any
        ) -> Any:
            a, b, a_scale, b_scale, _, out, _ = inputs
            tile, chosen = self._resolve(inputs, tactic)
            kernel = compile_wide(tile, chosen, pdl=self.pdl)
            if do_preparation:
                return out
            return launch_wide(kernel, b.t(), b_scale, a, a_scale, out)

    WideLowLatencyGemmRunner.__qualname__ = CLASS_NAME
    return WideLowLatencyGemmRunner


@functools.cache
def wide_runner(
    pdl: bool = True, max_rows: int = WIDE_MAX_ROWS, rounding: int = TILE_ROUNDING
) -> Any:
    """The wide runner for these options (one instance each, like FlashInfer's cached runners)."""
    return runner_class()(pdl, max_rows, rounding)
