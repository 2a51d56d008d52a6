"""Recorded measurements: a :class:`RecordingTimer` saves every sample another timer takes, and
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

import json
import os
from pathlib import Path
from typing import Any

from fi_patches._untrusted import value_text
from fi_patches.chain.errors import ReplayError
from fi_patches.chain.ops import Op
from fi_patches.chain.timing import Timed, Timer, Trial
from fi_patches.pins.errors import PinTableError
from fi_patches.pins.keys import as_tactic, tactic_json
from fi_patches.pins.reading import read_data_file

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
