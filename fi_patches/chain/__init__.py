"""Tuning tactics in the chain they run in: a harness that runs a chain of GEMM ops back to back
on one stream, captured in a CUDA graph, times graph replays with CUDA events, and chooses each
op's tactic per row bucket by coordinate descent, with a tie tolerance and a recorded
provenance (``python -m fi_patches tune``).

The harness (spec, ops, timing, select, provenance, replay) needs neither FlashInfer nor a
Blackwell GPU: an op is anything with ``get_valid_tactics(inputs, profile)`` and
``forward(inputs, tactic=...)`` (:class:`RunnerOp`). FlashInfer's MXFP8 runners are adapted in
:mod:`fi_patches.chain.mxfp8_ops`. ``import fi_patches.chain`` imports neither torch nor
FlashInfer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fi_patches._lazy import lazy_exports

_EXPORTS = {
    "ChainSpec": "fi_patches.chain.spec",
    "Bucket": "fi_patches.chain.spec",
    "Settings": "fi_patches.chain.spec",
    "ChainError": "fi_patches.chain.errors",
    "ChainSpecError": "fi_patches.chain.errors",
    "TuneError": "fi_patches.chain.errors",
    "ReplayError": "fi_patches.chain.errors",
    "UpstreamError": "fi_patches.chain.errors",
    "Op": "fi_patches.chain.ops",
    "RunnerOp": "fi_patches.chain.ops",
    "Trial": "fi_patches.chain.timing",
    "Timer": "fi_patches.chain.timing",
    "CudaGraphTimer": "fi_patches.chain.timing",
    "chain_position": "fi_patches.chain.timing",
    "ReplayTimer": "fi_patches.chain.replay",
    "RecordingTimer": "fi_patches.chain.replay",
    "Slot": "fi_patches.chain.select",
    "tune": "fi_patches.chain.select",
    "BucketResult": "fi_patches.chain.provenance",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fi_patches.chain.errors import ChainError as ChainError
    from fi_patches.chain.errors import ChainSpecError as ChainSpecError
    from fi_patches.chain.errors import ReplayError as ReplayError
    from fi_patches.chain.errors import TuneError as TuneError
    from fi_patches.chain.errors import UpstreamError as UpstreamError
    from fi_patches.chain.ops import Op as Op
    from fi_patches.chain.ops import RunnerOp as RunnerOp
    from fi_patches.chain.provenance import BucketResult as BucketResult
    from fi_patches.chain.replay import RecordingTimer as RecordingTimer
    from fi_patches.chain.replay import ReplayTimer as ReplayTimer
    from fi_patches.chain.select import Slot as Slot
    from fi_patches.chain.select import tune as tune
    from fi_patches.chain.spec import Bucket as Bucket
    from fi_patches.chain.spec import ChainSpec as ChainSpec
    from fi_patches.chain.spec import Settings as Settings
    from fi_patches.chain.timing import CudaGraphTimer as CudaGraphTimer
    from fi_patches.chain.timing import Timer as Timer
    from fi_patches.chain.timing import Trial as Trial
    from fi_patches.chain.timing import chain_position as chain_position

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
