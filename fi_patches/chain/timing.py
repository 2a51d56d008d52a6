"""Timing a chain: the :class:`Timer` interface the selection measures through, and its CUDA
implementation, which captures the chain's launches back to back on one stream into a CUDA
graph and times graph replays with CUDA events.

Other implementations replay recorded measurements (:mod:`fi_patches.chain.replay`), which is
how tests and ``tune --timings FILE`` select without a GPU.
"""

from __future__ import annotations

import contextvars
import itertools
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from fi_patches.chain.errors import TuneError
from fi_patches.chain.ops import Op
from fi_patches.pins.keys import tactic_json


@dataclass(frozen=True)
class Trial:
    """One thing to time: the ops ``names`` in launch order at ``rows`` rows, each with its
    tactic. ``ops`` are the op objects (not part of the trial's identity)."""

    rows: int
    names: tuple[str, ...]
    tactics: tuple[Any, ...]
    ops: tuple[Op, ...] = field(default=(), compare=False, hash=False, repr=False)

    def key(self) -> str:
        """The trial as a JSON string (how recorded measurements are looked up)."""
        return json.dumps([self.rows, list(self.names), tactic_json(list(self.tactics))])


class Timed(Protocol):
    """A trial ready to sample (for CUDA: its captured graph)."""

    def sample(self) -> float:
        """One sample of the trial's time, in microseconds."""
        ...

    def close(self) -> None: ...


class Timer(Protocol):
    """Measures trials; the selection interleaves the samples of the trials it compares."""

    def prepare(self, trial: Trial) -> Timed: ...


@dataclass(frozen=True)
class ChainPosition:
    """Where an op is being launched: the ``run`` (one per capture or eager run of a chain) and
    its ``index`` in that run. Ops may read it, e.g. to overlap work with the previous op."""

    run: int
    index: int
    trial: Trial


_position: contextvars.ContextVar[ChainPosition | None] = contextvars.ContextVar(
    "fi_patches_chain_position", default=None
)
_runs = itertools.count(1)


def chain_position() -> ChainPosition | None:
    """The position of the op being launched by :func:`run_chain`, else None."""
    return _position.get()


@contextmanager
def _at(position: ChainPosition) -> Iterator[None]:
    token = _position.set(position)
    try:
        yield
    finally:
        _position.reset(token)


def run_chain(trial: Trial, inputs: Sequence[Any]) -> None:
    """Launch the trial's ops in order on the current stream."""
    run = next(_runs)
    for index, (op, tactic, args) in enumerate(zip(trial.ops, trial.tactics, inputs, strict=True)):
        with _at(ChainPosition(run, index, trial)):
            op.launch(args, tactic)


class CudaGraphTimer:
    """Times trials as CUDA-graph replays on one stream, with CUDA events.

    Each trial's launches are run once eagerly (compiling anything lazy), captured into one
    graph, replayed ``warmup`` times, then sampled: a sample is the mean of ``replays`` timed
    replays. With ``cold_l2`` every timed replay follows a write of twice the L2 size, outside
    the timed region.
    """

    def __init__(
        self, *, replays: int = 10, warmup: int = 3, cold_l2: bool = True, device: Any = None
    ) -> None:
        import torch

        if not torch.cuda.is_available():
            raise TuneError("timing a chain needs a CUDA device; torch sees none")
        self.torch = torch
        self.device = (
            torch.device("cuda", torch.cuda.current_device())
            if device is None
            else torch.device(device)
        )
        self.replays = replays
        self.warmup = warmup
        self.flush = None
        if cold_l2:
            l2 = int(getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 0))
            self.flush = torch.empty(max(2 * l2, 64 << 20), dtype=torch.uint8, device=self.device)
        self.stream = torch.cuda.Stream(self.device)

    def describe(self) -> str:
        name = self.torch.cuda.get_device_name(self.device)
        l2 = "cold L2" if self.flush is not None else "warm L2"
        return f"CUDA graph replays on {name}, {self.replays} per sample, {l2}"

    def prepare(self, trial: Trial) -> Timed:
        torch = self.torch
        with torch.cuda.device(self.device):
            inputs = [op.inputs(trial.rows) for op in trial.ops]
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                run_chain(trial, inputs)  # compiles and allocates outside the capture
            torch.cuda.current_stream().wait_stream(self.stream)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, stream=self.stream):
                    run_chain(trial, inputs)
            except Exception as exc:
                raise TuneError(
                    f"capturing {' -> '.join(trial.names)} at {trial.rows} rows into a CUDA "
                    f"graph failed ({type(exc).__name__}: {exc})"
                ) from exc
            for _ in range(self.warmup):
                graph.replay()
            torch.cuda.synchronize()
        return _GraphTimed(self, graph)


class _GraphTimed:
    def __init__(self, timer: CudaGraphTimer, graph: Any) -> None:
        self.timer = timer
        self.graph = graph
        torch = timer.torch
        self.begin = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def sample(self) -> float:
        timer, graph = self.timer, self.graph
        with timer.torch.cuda.device(timer.device):
            if timer.flush is None:
                self.begin.record()
                for _ in range(timer.replays):
                    graph.replay()
                self.end.record()
                self.end.synchronize()
                return float(self.begin.elapsed_time(self.end)) * 1000.0 / timer.replays
            total = 0.0
            for _ in range(timer.replays):
                timer.flush.zero_()
                self.begin.record()
                graph.replay()
                self.end.record()
                self.end.synchronize()
                total += float(self.begin.elapsed_time(self.end)) * 1000.0
            return total / timer.replays

    def close(self) -> None:
        self.graph.reset()
