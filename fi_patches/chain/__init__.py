"""Tuning tactics in the chain they run in: a harness that runs a chain of GEMM ops back to back
on one stream, captured in a CUDA graph, times graph replays with CUDA events, and chooses each
op's tactic per row bucket by coordinate descent, with a tie tolerance and a recorded
provenance (``python -m fi_patches tune``).

The harness (spec, ops, timing, select, provenance, replay) needs neither FlashInfer nor a
Blackwell GPU: an op is anything with ``get_valid_tactics(inputs, profile)`` and
``forward(inputs, tactic=...)`` (:class:`RunnerOp`). FlashInfer's MXFP8 runners are adapted in
:mod:`fi_patches.chain.ops`. ``import fi_patches.chain`` imports neither torch nor
FlashInfer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fi_patches._lazy import lazy_exports

_EXPORTS = {
    "ChainSpec": "fi_patches.chain.spec",
    "Bucket": "fi_patches.chain.spec",
    "Settings": "fi_patches.chain.spec",
    "ChainError": "fi_patches.chain.spec",
    "ChainSpecError": "fi_patches.chain.spec",
    "TuneError": "fi_patches.chain.spec",
    "ReplayError": "fi_patches.chain.spec",
    "UpstreamError": "fi_patches.chain.spec",
    "Op": "fi_patches.chain.ops",
    "RunnerOp": "fi_patches.chain.ops",
    "Trial": "fi_patches.chain.timing",
    "Timer": "fi_patches.chain.timing",
    "CudaGraphTimer": "fi_patches.chain.timing",
    "chain_position": "fi_patches.chain.timing",
    "ReplayTimer": "fi_patches.chain.timing",
    "RecordingTimer": "fi_patches.chain.timing",
    "Slot": "fi_patches.chain.select",
    "tune": "fi_patches.chain.select",
    "BucketResult": "fi_patches.chain.select",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from fi_patches.chain.ops import Op as Op
    from fi_patches.chain.ops import RunnerOp as RunnerOp
    from fi_patches.chain.select import BucketResult as BucketResult
    from fi_patches.chain.select import Slot as Slot
    from fi_patches.chain.select import tune as tune
    from fi_patches.chain.spec import Bucket as Bucket
    from fi_patches.chain.spec import ChainError as ChainError
    from fi_patches.chain.spec import ChainSpec as ChainSpec
    from fi_patches.chain.spec import ChainSpecError as ChainSpecError
    from fi_patches.chain.spec import ReplayError as ReplayError
    from fi_patches.chain.spec import Settings as Settings
    from fi_patches.chain.spec import TuneError as TuneError
    from fi_patches.chain.spec import UpstreamError as UpstreamError
    from fi_patches.chain.timing import CudaGraphTimer as CudaGraphTimer
    from fi_patches.chain.timing import RecordingTimer as RecordingTimer
    from fi_patches.chain.timing import ReplayTimer as ReplayTimer
    from fi_patches.chain.timing import Timer as Timer
    from fi_patches.chain.timing import Trial as Trial
    from fi_patches.chain.timing import chain_position as chain_position

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
