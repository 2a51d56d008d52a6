"""Timing a chain: the :class:`Timer` interface the selection measures through, and its CUDA
implementation, which captures the chain's launches back to back on one stream into a CUDA
graph and times graph replays with CUDA events.

Other implementations replay recorded measurements (:mod:`fi_patches.chain.timing`), which is
how tests and ``tune --timings FILE`` select without a GPU.

Recorded measurements: a :class:`RecordingTimer` saves every sample another timer takes, and
a :class:`ReplayTimer` selects from such a file with no GPU (``tune --timings FILE``).

The file is JSON: ``format``, the ``device`` and ``flashinfer`` release measured on, one
entry per prepared trial, in order: ``rows``, ``ops`` (names in launch order), ``tactics`` and
``samples_us``, and the ``candidates`` each op offered: ``op``, ``section`` (null for an op
outside the pin table's sections), ``rows`` and ``tactics`` in the runner's order. Replaying
hands each trial's entries out in recorded order, so replaying a file with the chain and
settings it was recorded with reproduces that run; a trial prepared more often than recorded
starts over at its first entry, and a sample asked for beyond an entry's samples starts over at
its first sample. The ops offer the recorded candidates, so a replay never asks a runner (some
need the device to list their tactics); a file without ``candidates`` (recorded before they
were) lets the runners list them, where they can.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fi_patches._text import value_text
from fi_patches.chain.ops import Op
from fi_patches.chain.spec import ReplayError, TuneError
from fi_patches.pins.keys import as_tactic, tactic_json
from fi_patches.pins.reading import PinTableError, read_data_file


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


FORMAT = "fi_patches.chain.timings/1"

MAX_BYTES = 1 << 28
"""The largest timings file read (256 MiB; a chain's recording is a few MiB)."""


def _other_kind(data: Any) -> str | None:
    """What a JSON file given as timings is instead, when it is one of the files the other
    commands read (a FlashInfer tuner cache, a pin table), and the command that reads it."""
    from fi_patches.internals.tuner import V1_METADATA

    if not isinstance(data, dict) or "format" in data:
        return None
    if V1_METADATA in data or any(isinstance(k, str) and k.startswith("(") for k in data):
        return (
            "is a FlashInfer tuner cache, not a timings file (which tune --save-timings "
            "writes); pins record --from reads tuner caches"
        )
    if "meta" in data:
        return (
            "is a pin table, not a timings file (which tune --save-timings writes); "
            "tune --pins reads pin tables"
        )
    return None


class _Samples:
    def __init__(self, samples: list[float]) -> None:
        self.samples = samples
        self.taken = 0

    def sample(self) -> float:
        value = self.samples[self.taken % len(self.samples)]
        self.taken += 1
        return value

    def close(self) -> None:
        pass


class ReplayTimer:
    """Select from recorded measurements (see the module docstring for the file)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        try:
            data = read_data_file(
                Path(path), self.path, what="timings file", max_bytes=MAX_BYTES, suffixes=()
            )
        except PinTableError as exc:
            raise ReplayError(exc.one_line()) from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            other = _other_kind(data)
            if other is not None:
                raise ReplayError(f"{path}: {other}")
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ReplayError(f"{path}: format = {value_text(found)}: must be {value_text(FORMAT)}")
        self.device = _text(path, data, "device")
        self.flashinfer = _text(path, data, "flashinfer")
        self.recorded_with = str(data.get("timer", ""))
        trials = data.get("trials")
        if not isinstance(trials, list):
            raise ReplayError(f"{path}: trials = {value_text(trials)}: must be a list")
        self._entries: dict[str, list[list[float]]] = {}
        for position, entry in enumerate(trials, start=1):
            trial, samples = _entry(path, position, entry)
            self._entries.setdefault(trial.key(), []).append(samples)
        self._used: dict[str, int] = {}
        listed = data.get("candidates")
        if listed is not None and not isinstance(listed, list):
            raise ReplayError(f"{path}: candidates = {listed!r}: must be a list")
        self.candidates: dict[_Listing, list[Any]] | None = (
            None
            if listed is None
            else dict(_candidates(path, i, entry) for i, entry in enumerate(listed, start=1))
        )
        """Each op's recorded tactics per section and rows; None: the file records none."""

    def listing(self, op: Op) -> Op:
        """``op``, offering the recorded candidates instead of asking its runner."""
        return _ReplayedOp(op, self)

    def describe(self) -> str:
        made = f" ({self.recorded_with})" if self.recorded_with else ""
        return f"recorded measurements from {self.path}{made}"

    def prepare(self, trial: Trial) -> Timed:
        key = trial.key()
        batches = self._entries.get(key)
        if not batches:
            chain = ", ".join(
                f"{n} {tactic_json(t)}" for n, t in zip(trial.names, trial.tactics, strict=True)
            )
            raise ReplayError(
                f"{self.path} has no measurement of {chain} at {trial.rows} rows; record it "
                "with tune --save-timings on the same chain and settings"
            )
        used = self._used.get(key, 0)
        self._used[key] = used + 1
        return _Samples(batches[used % len(batches)])


_Listing = tuple[str, "str | None", int]
"""What a candidate list is recorded for: the op's name, its section and the rows."""


def _listing_of(op: Op, rows: int) -> _Listing:
    section = getattr(op, "section", None)
    return (op.name, section if isinstance(section, str) else None, rows)


class _ListingOp:
    """An op of the chain whose ``tactics`` a timer answers or watches; everything else is the
    op's own."""

    def __init__(self, op: Op) -> None:
        self.op = op
        self.name = op.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.op, name)

    def __repr__(self) -> str:
        return repr(self.op)

    def inputs(self, rows: int) -> Any:
        return self.op.inputs(rows)

    def launch(self, inputs: Any, tactic: Any) -> None:
        self.op.launch(inputs, tactic)


class _ReplayedOp(_ListingOp):
    def __init__(self, op: Op, replay: ReplayTimer) -> None:
        super().__init__(op)
        self.replay = replay

    def tactics(self, rows: int) -> list[Any]:
        recorded = self.replay.candidates
        if recorded is None:
            try:
                return self.op.tactics(rows)
            except Exception as exc:
                raise ReplayError(
                    f"{self.replay.path} records no candidates (the tactics each op offers; "
                    f"tune --save-timings records them), and {self.op!r} (op {self.name!r}) "
                    f"cannot list its own at {rows} rows here ({type(exc).__name__}: {exc}); "
                    "record the timings again with tune --save-timings"
                ) from exc
        listing = _listing_of(self.op, rows)
        if listing not in recorded:
            raise ReplayError(
                f"{self.replay.path} has no candidates of {self.op!r} (op {self.name!r}) at "
                f"{rows} rows; record it with tune --save-timings on the same chain and settings"
            )
        return list(recorded[listing])


class _RecordedOp(_ListingOp):
    def __init__(self, op: Op, recorder: RecordingTimer) -> None:
        super().__init__(op)
        self.recorder = recorder

    def tactics(self, rows: int) -> list[Any]:
        offered = list(self.op.tactics(rows))
        self.recorder.candidates.setdefault(_listing_of(self.op, rows), offered)
        return offered


def _candidates(
    path: str | os.PathLike[str], position: int, entry: Any
) -> tuple[_Listing, list[Any]]:
    where = f"{path}: candidates #{position}"
    if not isinstance(entry, dict):
        raise ReplayError(f"{where}: must be a table")
    name, section = entry.get("op"), entry.get("section")
    rows, tactics = entry.get("rows"), entry.get("tactics")
    if not isinstance(name, str) or not name:
        raise ReplayError(f"{where}: op = {name!r}: must be an op name")
    if section is not None and not isinstance(section, str):
        raise ReplayError(f"{where}: section = {section!r}: must be a section name or null")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ReplayError(f"{where}: rows = {rows!r}: must be a positive integer")
    if not isinstance(tactics, list):
        raise ReplayError(f"{where}: tactics = {tactics!r}: must be a list of tactics")
    return (name, section, rows), [as_tactic(t) for t in tactics]


def _text(path: str | os.PathLike[str], data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise ReplayError(f"{path}: {name} = {value_text(value)}: must be a non-empty string")
    return value


def _entry(path: str | os.PathLike[str], position: int, entry: Any) -> tuple[Trial, list[float]]:
    where = f"{path}: trials #{position}"
    if not isinstance(entry, dict):
        raise ReplayError(f"{where}: must be a table")
    rows, names = entry.get("rows"), entry.get("ops")
    tactics, samples = entry.get("tactics"), entry.get("samples_us")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ReplayError(f"{where}: rows = {value_text(rows)}: must be a positive integer")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ReplayError(
            f"{where}: ops = {value_text(names)}: must be a non-empty list of op names"
        )
    if not isinstance(tactics, list) or len(tactics) != len(names):
        raise ReplayError(f"{where}: tactics = {value_text(tactics)}: must list one tactic per op")
    if (
        not isinstance(samples, list)
        or not samples
        or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) and s >= 0 for s in samples
        )
    ):
        raise ReplayError(
            f"{where}: samples_us = {value_text(samples)}: "
            "must be a non-empty list of non-negative numbers"
        )
    trial = Trial(rows, tuple(names), tuple(as_tactic(t) for t in tactics))
    return trial, [float(s) for s in samples]


class _Recorded:
    def __init__(self, inner: Timed, record: dict[str, Any]) -> None:
        self.inner = inner
        self.record = record

    def sample(self) -> float:
        value = self.inner.sample()
        self.record["samples_us"].append(value)
        return value

    def close(self) -> None:
        self.inner.close()


class RecordingTimer:
    """Passes every trial to ``inner`` and keeps what it measured, for :meth:`save`."""

    def __init__(self, inner: Timer) -> None:
        self.inner = inner
        self.trials: list[dict[str, Any]] = []
        self.candidates: dict[_Listing, list[Any]] = {}

    def listing(self, op: Op) -> Op:
        """``op`` as the inner timer lists it (a replay's recorded candidates, else the op's
        own), keeping what it offered for :meth:`save`."""
        inner = getattr(self.inner, "listing", None)
        return _RecordedOp(inner(op) if callable(inner) else op, self)

    def describe(self) -> str:
        describe = getattr(self.inner, "describe", None)
        return str(describe()) if callable(describe) else type(self.inner).__name__

    def prepare(self, trial: Trial) -> Timed:
        record: dict[str, Any] = {
            "rows": trial.rows,
            "ops": list(trial.names),
            "tactics": tactic_json(list(trial.tactics)),
            "samples_us": [],
        }
        self.trials.append(record)
        return _Recorded(self.inner.prepare(trial), record)

    def text(self, *, device: str, flashinfer: str) -> str:
        """The timings file's content (what ``--save-timings`` writes): one trial per line."""
        head = {
            "format": FORMAT,
            "device": device,
            "flashinfer": flashinfer,
            "timer": self.describe(),
            "candidates": [
                {"op": name, "section": section, "rows": rows, "tactics": tactic_json(tactics)}
                for (name, section, rows), tactics in self.candidates.items()
            ],
        }
        trials = [json.dumps(t, separators=(",", ":")) for t in self.trials if t["samples_us"]]
        fields = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
        listed = ",\n  ".join(trials)
        body = f' "trials": [\n  {listed}\n ]' if trials else ' "trials": []'
        return "{\n" + ",\n".join([*fields, body]) + "\n}\n"
