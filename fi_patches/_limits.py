"""The low-latency MXFP8 GEMM's row and tile limits, and the names FlashInfer's tuner knows the
wide runner by: one named constant each, standard library only, so the lockfile format, the
engine and the features read the same number without importing one another."""

from __future__ import annotations

LOW_LATENCY_MAX_ROWS = 8
"""FlashInfer's low-latency runner serves at most 8 activation rows."""

WIDE_MAX_ROWS = 48
"""Most rows the wide tile serves by default (tiles 16, 32, 48)."""

WIDE_MAX_TILE = 128
"""Widest activation tile of the low-latency kernel's body: the SFB TMEM column count assumes
one 128-row scale atom per tile (see ``wide.budget``)."""

WIDE_RUNNER = "WideLowLatencyGemmRunner"
"""The wide runner's class name, as FlashInfer's tuner keys its cache entries."""

WIDE_OP = "fi_patches_wide_mxfp8_gemm"
"""The custom op FlashInfer's tuner tunes the wide runner under."""
