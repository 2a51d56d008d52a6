"""Preseed mode: write each pinned tactic into FlashInfer's tuner cache for every bucket of its
row range, so tuning a pinned problem profiles nothing; put the previous entries back on exit.

The keys are FlashInfer's own, built from the real runner and inputs shaped as ``mm_mxfp8``
passes them (the key holds the bucket, the workspace size and the runner's dtype extras). Seeding
is all or nothing: every key is built before anything is written, and a failed write undoes the
writes before it. Exit puts back exactly the entries the seeds replaced, except where the tuner
itself has replaced a seed since (its newer winner stays)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fi_patches.compat.installed import installed_flashinfer
from fi_patches.internals import InternalError, error_text
from fi_patches.internals import flashinfer as fi
from fi_patches.pinning.probe_inputs import mxfp8_runner_inputs
from fi_patches.pins.table import PinTable

_ABSENT: Any = object()


@dataclass
class _Seed:
    store: MutableMapping[Any, Any]
    key: Any
    value: Any
    previous: Any = _ABSENT


def _runner_for(section: str, sm: int) -> Any:
    import torch

    from fi_patches.cute_dsl.runner import cute_dsl_runner

    if section == "low_latency":
        return fi.low_latency_runner(sm, True)
    return cute_dsl_runner(sm // 10, sm % 10, torch.bfloat16)


PRESEEDED_SECTIONS = ("low_latency", "cute_dsl")
"""The sections whose runners FlashInfer's tuner caches (wide pins narrow fi_patches' own
runner instead)."""


def _buckets(lo: int, hi: int, bucket_of: Callable[[int], int]) -> list[int]:
    return sorted({bucket_of(rows) for rows in range(lo, hi + 1)})


def _plan(items: Sequence[tuple[Any, list[Any], Any]]) -> list[_Seed]:
    """The seeds for ``(runner, inputs, tactic)`` items, keys built, nothing written."""
    tuner = fi.tuner()
    winners = fi.winner_cache(tuner)
    policies = fi.policy_store(tuner)
    config = fi.tuning_config()
    policy = fi.policy(config)
    version = installed_flashinfer().version
    seeds = []
    for runner, inputs, tactic in items:
        key = fi.cache_key(tuner, runner, inputs)
        seeds.append(_Seed(winners, key, (tactic, None)))
        seeds.append(_Seed(policies, fi.policy_key(tuner, key, version), policy))
    return seeds


def _undo(seeds: list[_Seed]) -> None:
    for seed in reversed(seeds):
        if seed.store.get(seed.key, _ABSENT) is not seed.value:
            continue  # the tuner replaced the seed since: its newer winner stays
        if seed.previous is _ABSENT:
            del seed.store[seed.key]
        else:
            seed.store[seed.key] = seed.previous


@contextmanager
def seeded_entries(items: Sequence[tuple[Any, list[Any], Any]]) -> Iterator[None]:
    """Inside, FlashInfer's tuner cache holds each ``tactic`` as the winner of its runner and
    inputs; on exit the previous entries come back. A seed that cannot be built or written
    raises :class:`~fi_patches.internals.InternalError` with nothing left seeded."""
    tuner = fi.tuner()
    written: list[_Seed] = []
    with fi.tuner_lock(tuner):
        try:
            for seed in _plan(items):
                seed.previous = seed.store.get(seed.key, _ABSENT)
                seed.store[seed.key] = seed.value
                written.append(seed)
        except Exception as exc:
            _undo(written)
            raise InternalError(
                f"FlashInfer's tuner cache took {len(written)} seeds, then refused one "
                f"({error_text(exc)}); nothing stays seeded"
            ) from exc
    try:
        yield
    finally:
        with fi.tuner_lock(tuner):
            _undo(written)


def table_items(table: PinTable, sections: tuple[str, ...], sm: int) -> list[tuple[Any, ...]]:
    """``(runner, inputs, tactic)`` for every bucket of every pin of ``sections``."""
    bucket_of = fi.bucket_of()
    workspace = fi.workspace_size()
    items: list[tuple[Any, ...]] = []
    for section in sections:
        if section not in PRESEEDED_SECTIONS or not table.entries(section):
            continue
        runner = _runner_for(section, sm)
        for entry in table.entries(section):
            for bucket in _buckets(entry.min_rows, entry.max_rows, bucket_of):
                inputs = mxfp8_runner_inputs(entry.n, entry.k, bucket, workspace_bytes=workspace)
                items.append((runner, inputs, entry.tactic))
    return items


@contextmanager
def preseeded(table: PinTable, sections: tuple[str, ...], sm: int) -> Iterator[None]:
    """Seed every pin of ``sections`` for the block's duration (all or nothing)."""
    with seeded_entries(table_items(table, sections, sm)):
        yield
