"""SIMULATION: run FlashInfer's real tuner and runners on CPU as if on an sm_103 GPU.

Only device-only helpers are replaced, each with the smallest stand-in:

* ``get_compute_capability`` answers ``(10, 3)`` (the CPU has none), and
  ``torch.cuda.get_device_properties`` describes a 148-SM sm_103 device (the cute-dsl runner
  reads the SM count to list its prefetch tactics);
* ``mm_mxfp8``'s workspace helper returns a CPU buffer (it allocates on the current CUDA device);
* ``torch.cuda.is_current_stream_capturing`` answers False (CPU torch raises);
* ``AutoTuner._get_l2_cache_size_in_bytes`` answers 0, so the cold-L2 input rotation of
  0.7.0-0.7.2.post1 makes a single copy instead of querying a CUDA device;
* ``TunableRunner.precompile_tactics`` reports the compile as done (it launches a kernel);
* ``AutoTuner._profile_single_kernel`` is a spy: it records each (runner, rows, tactic) the tuner
  profiles and returns a deterministic time in which split-K wins, as it does when timed alone.

Everything else -- ``mm_mxfp8``'s dispatch, the runners' ``get_valid_tactics``, the tuner's
buckets, cache keys, lookups and choice -- is FlashInfer's own code. The kernel launch still
fails on CPU, which is where these tests stop.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

SIMULATED_CAPABILITY = (10, 3)
SIMULATED_SM_COUNT = 148


@dataclasses.dataclass(frozen=True)
class SimulatedProperties:
    name: str = "SIMULATED sm_103 (fi_patches tests)"
    major: int = 10
    minor: int = 3
    multi_processor_count: int = SIMULATED_SM_COUNT
    total_memory: int = 288 * 2**30
    L2_cache_size: int = 126 * 2**20


SIMULATED_PROPERTIES = SimulatedProperties()


@dataclasses.dataclass
class Profiled:
    runner: str
    rows: int
    tactic: Any


@dataclasses.dataclass
class TunerSpy:
    profiled: list[Profiled] = dataclasses.field(default_factory=list)

    def offered(self, rows: int, runner: str | None = None) -> list[Any]:
        """Tactics profiled for the tuning profile of ``rows`` rows."""
        return [
            p.tactic
            for p in self.profiled
            if p.rows == rows and (runner is None or p.runner == runner)
        ]

    def rows_profiled(self) -> list[int]:
        return sorted({p.rows for p in self.profiled})

    def clear(self) -> None:
        self.profiled.clear()


def simulated_time(tactic: Any) -> float:
    """Split-K tactics 'win' (0.5) over the rest (1.0), as they do when timed in isolation."""
    if isinstance(tactic, tuple) and len(tactic) in (4, 5) and isinstance(tactic[-1], int):
        return 0.5 if tactic[-1] > 1 else 1.0
    return 1.0


def install(monkeypatch: pytest.MonkeyPatch) -> TunerSpy:
    """Apply the simulation for one test (monkeypatch undoes it); returns the tuner spy."""
    import flashinfer.utils as fi_utils
    from flashinfer.autotuner import AutoTuner, TunableRunner
    from flashinfer.gemm import gemm_base

    def capability(device: Any) -> tuple[int, int]:
        return SIMULATED_CAPABILITY

    for module in (fi_utils, gemm_base):
        if hasattr(module, "get_compute_capability"):
            monkeypatch.setattr(module, "get_compute_capability", capability)

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: SIMULATED_PROPERTIES)
    for module in (fi_utils, gemm_base):
        if hasattr(module, "get_device_sm_count"):
            monkeypatch.setattr(module, "get_device_sm_count", lambda device: SIMULATED_SM_COUNT)

    buffers: dict[tuple[str, int], torch.Tensor] = {}

    def workspace(name: str, size: int, device: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        return buffers.setdefault((name, size), torch.empty(size, dtype=torch.uint8))

    for helper in ("_get_stream_cache_buf", "_get_cache_buf"):
        if hasattr(gemm_base, helper):
            monkeypatch.setattr(gemm_base, helper, workspace)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(TunableRunner, "precompile_tactics", lambda self, *a, **k: True)
    if hasattr(AutoTuner, "_get_l2_cache_size_in_bytes"):
        monkeypatch.setattr(AutoTuner, "_get_l2_cache_size_in_bytes", lambda self, *a, **k: 0)

    spy = TunerSpy()

    def profile(
        self: Any, runner: Any, inputs: Any, tactic: Any, *args: Any, **kwargs: Any
    ) -> float:
        spy.profiled.append(Profiled(type(runner).__name__, int(inputs[0].shape[0]), tactic))
        return simulated_time(tactic)

    monkeypatch.setattr(AutoTuner, "_profile_single_kernel", profile)
    return spy
