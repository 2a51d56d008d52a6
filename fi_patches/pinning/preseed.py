"""Preseed mode: write each pinned tactic into FlashInfer's tuner cache for every bucket of its
row range, so tuning a pinned problem profiles nothing; put the previous entries back on exit.

The keys are FlashInfer's own: built by ``AutoTuner._get_cache_key`` from the real runner and
inputs shaped as ``mm_mxfp8`` passes them (the key holds the bucket, the workspace size and the
runner's dtype extras). How a winner and its measurement policy are stored differs by release;
:func:`_publish` follows the release."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fi_patches.pinning.probe_inputs import mxfp8_runner_inputs
from fi_patches.pinning.targets import GEMM_BASE
from fi_patches.pinning.validate import mxfp8_bucket_of
from fi_patches.pins.table import PinTable

CUSTOM_OP = "mxfp8_gemm"
_ABSENT: Any = object()


@dataclass
class _Seed:
    store: dict[Any, Any]
    key: Any
    value: Any
    previous: Any


_live: dict[int, list[_Seed]] = {}
"""The seeds of every open preseed block, so ``fi_patches.disable()`` can take them out now."""
_live_lock = threading.Lock()


def _runner_for(section: str, sm: int) -> Any:
    import torch

    gemm_base = importlib.import_module(GEMM_BASE)
    if section == "low_latency":
        return gemm_base._cutedsl_low_latency_blockscaled_gemm_runner(sm, True)
    from fi_patches.cute_dsl.runner import cute_dsl_runner

    return cute_dsl_runner(sm // 10, sm % 10, torch.bfloat16)


def _buckets(lo: int, hi: int, bucket_of: Callable[[int], int]) -> list[int]:
    return sorted({bucket_of(rows) for rows in range(lo, hi + 1)})


def _policy_key(tuner: Any, key: Any) -> Any:
    """0.7.0/0.7.0.post1 key policies by the cache key; 0.7.1+ by ``(identity, key)``."""
    from packaging.version import Version

    from fi_patches.compat.installed import installed_flashinfer

    version = installed_flashinfer().version
    if version is not None and version < Version("0.7.1"):
        return key
    return (tuner._winner_cache_identity(), key)


def _publish(tuner: Any, key: Any, tactic: Any, config: Any) -> list[_Seed]:
    """Store ``tactic`` under ``key`` as FlashInfer stores a tuned winner; the seeds to undo."""
    seeds = []
    winners = tuner._winner_cache()
    value = (tactic, None)
    seeds.append(_Seed(winners, key, value, winners.get(key, _ABSENT)))
    winners[key] = value
    policies = tuner._profiling_cache_policies
    policy_key = _policy_key(tuner, key)
    policy = tuner._profiling_policy(config)
    seeds.append(_Seed(policies, policy_key, policy, policies.get(policy_key, _ABSENT)))
    policies[policy_key] = policy
    return seeds


def seed_table(table: PinTable, sections: tuple[str, ...], sm: int) -> list[_Seed]:
    """Write every pin of ``sections`` into the tuner's cache; returns what to undo."""
    from flashinfer.autotuner import AutoTuner

    tuner = AutoTuner.get()
    gemm_base = importlib.import_module(GEMM_BASE)
    config = gemm_base._MM_MXFP8_CUTE_DSL_TUNING_CONFIG
    workspace = gemm_base.DEFAULT_WORKSPACE_SIZE
    bucket_of = mxfp8_bucket_of()
    seeds: list[_Seed] = []
    with tuner._lock:
        for section in sections:
            if section not in ("low_latency", "cute_dsl"):
                continue
            runner = _runner_for(section, sm)
            for entry in table.entries(section):
                for bucket in _buckets(entry.min_rows, entry.max_rows, bucket_of):
                    inputs = mxfp8_runner_inputs(
                        entry.n, entry.k, bucket, workspace_bytes=workspace
                    )
                    key = AutoTuner._get_cache_key(
                        CUSTOM_OP,
                        runner,
                        tuple(tuner._get_input_sizes(inputs)),
                        config,
                        runner.get_cache_key_extras(inputs),
                    )
                    seeds.extend(_publish(tuner, key, entry.tactic, config))
    return seeds


def unseed(seeds: list[_Seed]) -> None:
    """Put back what the seeds replaced, where the tuner has not replaced the seed since."""
    for seed in reversed(seeds):
        if seed.store.get(seed.key, _ABSENT) is not seed.value:
            continue
        if seed.previous is _ABSENT:
            del seed.store[seed.key]
        else:
            seed.store[seed.key] = seed.previous


def unseed_all() -> None:
    """Take the seeds of every open preseed block out of the tuner's cache now (their exit then
    finds nothing left to undo)."""
    with _live_lock:
        live = list(_live.values())
    for seeds in reversed(live):
        unseed(seeds)


@contextmanager
def preseeded(table: PinTable, sections: tuple[str, ...], sm: int) -> Iterator[None]:
    seeds = seed_table(table, sections, sm)
    with _live_lock:
        _live[id(seeds)] = seeds
    try:
        yield
    finally:
        with _live_lock:
            _live.pop(id(seeds), None)
        unseed(seeds)
