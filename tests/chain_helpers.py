"""Stand-ins for the chain harness tests: a runner offering a fixed list of tactics, and a
timer computing each sample from a cost model (a real :class:`~fi_patches.chain.timing.Timer`
implementation, injected through the interface; FlashInfer and fi_patches are not mocked)."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fi_patches.chain.ops import RunnerOp
from fi_patches.chain.select import Slot
from fi_patches.chain.spec import Bucket, chain_path
from fi_patches.chain.timing import RecordingTimer, Trial


def _torch_has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


cpu_only = pytest.mark.skipif(
    _torch_has_cuda(), reason="checks what happens where torch sees no CUDA device"
)
"""For tests of the CPU path: what tune, validate and the adapters do without a CUDA device."""


class ListRunner:
    """A runner with FlashInfer's two methods, offering ``tactics`` (or ``by_rows[rows]``)."""

    def __init__(self, tactics: Sequence[Any], by_rows: dict[int, Sequence[Any]] | None = None):
        self.tactics = list(tactics)
        self.by_rows = by_rows or {}
        self.launched: list[Any] = []

    def get_valid_tactics(self, inputs: Any, profile: Any) -> list[Any]:
        return list(self.by_rows.get(inputs["rows"], self.tactics))

    def forward(self, inputs: Any, tactic: Any = -1, **kwargs: Any) -> Any:
        self.launched.append((inputs["rows"], tactic))
        return None


def op(name: str, tactics: Sequence[Any], **kwargs: Any) -> RunnerOp:
    return RunnerOp(name, ListRunner(tactics, **kwargs), lambda rows: {"rows": rows})


def slots(
    *ops: RunnerOp, pins: dict[str, Any] | None = None, keys: Sequence[str] = ()
) -> list[Slot]:
    pins = pins or {}
    keys = list(keys) or [o.name for o in ops]
    return [Slot(o.name, key, o, pins.get(key)) for o, key in zip(ops, keys, strict=True)]


def bucket(lo: int, hi: int | None = None, index: int = 1) -> Bucket:
    hi = lo if hi is None else hi
    return Bucket(lo, hi, hi, index)


Cost = Callable[[Trial], float]


@dataclass
class _Sampled:
    timer: CostTimer
    trial: Trial
    closed: bool = False

    def sample(self) -> float:
        self.timer.sampled.append(self.trial)
        value = self.timer.cost(self.trial)
        if self.timer.noise:
            value *= 1.0 + self.timer.rng.uniform(-self.timer.noise, self.timer.noise)
        return value

    def close(self) -> None:
        self.closed = True


@dataclass
class CostTimer:
    """Samples ``cost(trial)`` microseconds, times ``1 +- noise`` (seeded)."""

    cost: Cost
    noise: float = 0.0
    seed: int = 0
    prepared: list[Trial] = field(default_factory=list)
    sampled: list[Trial] = field(default_factory=list)
    handles: list[_Sampled] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def describe(self) -> str:
        return "cost model"

    def prepare(self, trial: Trial) -> _Sampled:
        self.prepared.append(trial)
        handle = _Sampled(self, trial)
        self.handles.append(handle)
        return handle


def additive(
    costs: dict[str, dict[Any, float]], after: dict[str, dict[Any, float]] | None = None
) -> Cost:
    """Chain time = each op's cost of its tactic, plus ``after[op][tactic]`` when another op
    follows it in the trial (what overlapping with the next op costs that tactic)."""
    after = after or {}

    def cost(trial: Trial) -> float:
        total = 0.0
        for position, (name, tactic) in enumerate(zip(trial.names, trial.tactics, strict=True)):
            total += costs[name][tactic]
            if position + 1 < len(trial.names):
                total += after.get(name, {}).get(tactic, 0.0)
        return total

    return cost


def save(
    recorder: RecordingTimer, path: str | os.PathLike[str], *, device: str, flashinfer: str
) -> None:
    """Write ``recorder``'s timings file to ``path``, as ``--save-timings`` does."""
    Path(path).write_text(recorder.text(device=device, flashinfer=flashinfer), encoding="utf-8")


CHAIN = """
[chain]
name = "test-chain"
repeats = 3
tie_tolerance = 0.01
max_candidates = 6

[[bucket]]
min_rows = 5
max_rows = 8

[[bucket]]
min_rows = 17
max_rows = 32

[[bucket]]
min_rows = 65
max_rows = 128

[[op]]
name = "fused_wqa_wkv"
n = 2112
k = 7168
runner = "mxfp8"

[[op]]
name = "wq_b"
n = 6144
k = 1536
runner = "mxfp8"

[[op]]
name = "wo_b"
n = 7168
k = 4096
runner = "mxfp8"
"""
"""A CHAIN.toml of three MXFP8 ops and three buckets, for the CLI and file-handling tests."""

EXAMPLE = chain_path("deepseek_v3_tp4")
"""The DeepSeek-V3 TP4 example CHAIN.toml shipped in the package."""
