"""A tuned op of the tests' own, as a new FlashInfer op would be: two ``TunableRunner``s of
FlashInfer's real base class, tuned by FlashInfer's real ``AutoTuner.choose_one`` over a row
bucket (its real ``DynamicTensorSpec``/``TuningConfig``), with profiling simulated on CPU.

``start(seed)`` patches the profiling call with timings drawn from ``seed``: two starts with
other seeds pick other tactics, as fresh tunes on a GPU do. The runners record every tactic
their ``forward`` runs with, so a test sees which tactic a call really used.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

OP = "fi_patches_toy_gemm"
K = 64
WEIGHTS = (32, 48)


def _buckets(rows: int) -> tuple[int, ...]:
    return tuple(1 << i for i in range(max(1, int(rows)).bit_length()))


def _bucket(rows: int) -> int:
    return 1 << max(0, int(rows) - 1).bit_length()


@dataclass
class Ran:
    calls: list[tuple[str, int, Any]] = field(default_factory=list)
    """``(runner class, rows, tactic)`` of every ``forward`` that ran a kernel."""


RAN = Ran()


def runner_classes() -> tuple[type, type]:
    """``ToyTileRunner`` (tactics ``(tile, stages)`` by rows) and ``ToySplitRunner`` (ints)."""
    from flashinfer.autotuner import TunableRunner

    class ToyTileRunner(TunableRunner):
        def get_valid_tactics(self, inputs: Any, profile: Any = None) -> list[Any]:
            rows = int(inputs[0].shape[0])
            return [
                (tile, stages) for tile in (8, 16, 32) if tile >= min(rows, 32) for stages in (2, 3)
            ]

        def get_cache_key_extras(self, inputs: Any) -> tuple[Any, ...]:
            return (inputs[0].dtype,)

        def forward(
            self, inputs: Any, tactic: Any = -1, do_preparation: bool = False, **kw: Any
        ) -> Any:
            RAN.calls.append((type(self).__name__, int(inputs[0].shape[0]), tactic))
            return inputs[0] @ inputs[1]

    class ToySplitRunner(TunableRunner):
        def get_valid_tactics(self, inputs: Any, profile: Any = None) -> list[Any]:
            return [1, 2, 4]

        def forward(
            self, inputs: Any, tactic: Any = -1, do_preparation: bool = False, **kw: Any
        ) -> Any:
            RAN.calls.append((type(self).__name__, int(inputs[0].shape[0]), tactic))
            return inputs[0] @ inputs[1]

    return ToyTileRunner, ToySplitRunner


_CLASSES: list[tuple[type, type]] = []
_RUNNERS: list[Any] = []


def runners() -> list[Any]:
    """The op's runners (made once, as FlashInfer caches its factories' runners)."""
    if not _CLASSES:
        _CLASSES.append(runner_classes())
        _RUNNERS.extend(cls() for cls in _CLASSES[0])
    return list(_RUNNERS)


def config() -> Any:
    from flashinfer.autotuner import DynamicTensorSpec, TuningConfig

    return _config(DynamicTensorSpec, TuningConfig)


_CONFIG: list[Any] = []


def _config(spec: Any, cfg: Any) -> Any:
    if not _CONFIG:
        _CONFIG.append(cfg(dynamic_tensor_specs=(spec((0,), (0,), _buckets, _bucket),)))
    return _CONFIG[0]


def toy_mm(x: torch.Tensor, w: torch.Tensor, backend: int | None = None) -> torch.Tensor:
    """The op: FlashInfer's tuner chooses a runner and tactic, and that runner runs it. A
    ``backend`` (0: tile, 1: split) offers that runner alone, as FlashInfer's GEMMs called with
    a ``backend`` argument do."""
    from flashinfer.autotuner import AutoTuner

    offered = runners() if backend is None else runners()[backend : backend + 1]
    runner, tactic = AutoTuner.get().choose_one(OP, offered, config(), [x, w])
    return runner(inputs=[x, w], tactic=tactic)


def operands(rows: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(rows, K), torch.randn(K, n)


def warm_up(
    rows_list: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64), backend: int | None = None
) -> None:
    """What a server's warm-up does: every weight at every row count, once."""
    for n in WEIGHTS:
        for rows in rows_list:
            toy_mm(*operands(rows, n), backend=backend)


@dataclass
class Profiling:
    """What the simulated profiling timed: ``(runner class, rows, tactic)``."""

    timed: list[tuple[str, int, Any]] = field(default_factory=list)

    def at(self, rows: int, n: int | None = None) -> list[Any]:
        return [(r, t) for r, rw, t in self.timed if rw == rows]


def start(monkeypatch: pytest.MonkeyPatch, seed: int) -> Profiling:
    """A fresh start of the tuner (empty cache) whose profiling times tactics by ``seed``."""
    from flashinfer.autotuner import AutoTuner

    from tests import simulation

    simulation.install(monkeypatch)
    profiling = Profiling()

    def profile(self: Any, runner: Any, inputs: Any, tactic: Any, *args: Any, **kw: Any) -> float:
        rows = int(inputs[0].shape[0])
        profiling.timed.append((type(runner).__name__, rows, tactic))
        n = int(inputs[1].shape[1]) if len(inputs) > 1 and hasattr(inputs[1], "shape") else 0
        return random.Random(f"{seed}:{type(runner).__name__}:{rows}:{n}:{tactic}").random()

    monkeypatch.setattr(AutoTuner, "_profile_single_kernel", profile)
    AutoTuner.get().clear_cache()
    RAN.calls.clear()
    return profiling


def chosen(op: str = OP) -> dict[tuple[Any, ...], tuple[str, Any]]:
    """The tuner's cached winners of ``op``: ``(n, bucket) -> (runner class, tactic)``."""
    from flashinfer.autotuner import AutoTuner

    found = {}
    for key, value in AutoTuner.get().profiling_cache.items():
        if key.custom_op == op:
            profile = key.nearest_profile
            found[(int(profile[1][1]), int(profile[0][0]))] = (key.runner_class_name, value[0])
    return found


def winners(op: str = OP) -> dict[tuple[int, int, str], Any]:
    """The tuner's cached winners of ``op`` per runner: ``(n, bucket, runner class) -> tactic``
    (a bucket has one per runner where the op is called per ``backend``)."""
    from flashinfer.autotuner import AutoTuner

    found = {}
    for key, value in AutoTuner.get().profiling_cache.items():
        if key.custom_op == op:
            profile = key.nearest_profile
            found[(int(profile[1][1]), int(profile[0][0]), key.runner_class_name)] = value[0]
    return found


def tuner_namespace() -> dict[str, Any]:
    """FlashInfer's ``AutoTuner`` class attributes as they are now (a copy, to compare with
    what a block leaves)."""
    from flashinfer.autotuner import AutoTuner

    return dict(vars(AutoTuner))


def cleared() -> Iterator[None]:
    from flashinfer.autotuner import AutoTuner

    AutoTuner.get().clear_cache()
    yield
    AutoTuner.get().clear_cache()


def decoy_pins(count: int, ops: int = 7, runner_names: int = 11) -> list[dict[str, Any]]:
    """``count`` ``[[pin]]`` entries of made-up ops and runners, each with its own shapes (a
    large lockfile's bulk, none of which the toy op's calls match)."""
    return [
        {
            "op": f"op{i % ops}",
            "runner": f"Runner{i % runner_names}",
            "shapes": [["rows", 64 + i], [64 + i, 128], [-1]],
            "max_rows": 512,
            "tactic": [i, [i % 3, True]],
        }
        for i in range(count)
    ]
