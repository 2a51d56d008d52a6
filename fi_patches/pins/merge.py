"""Merge the winners of several FlashInfer tuner caches (one per rank, or several restarts)
into one winner per bucket, for ``pins record --from A --from B ...``.

The rule, per (runner, weight shape, bucket), over the caches that tuned that bucket:

1. every cache chose the same tactic: that tactic;
2. otherwise the tactic most caches chose (the majority);
3. a tie goes to the tied tactic that comes first in the runner's own enumerator order: FlashInfer's
   ``autotune_tactics`` for the low-latency runner, the cute-dsl runner's ``get_valid_tactics``
   (it needs the device's SM count, so off the device this step is skipped), fi_patches' own
   ``wide_tactics`` for the wide runner. That is the order FlashInfer would try them in;
4. still tied (no enumerator here): the tactic whose JSON text sorts first.

The outcome depends only on the caches' contents, never on the order of ``--from``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.pins.record import TunedEntry
from fi_patches.wide.runner import CLASS_NAME as WIDE_CLASS

LOW_LATENCY_CLASS = fi.LOW_LATENCY_RUNNER.builds
CUTE_DSL_CLASS = fi.CUTE_DSL_RUNNER.builds

TieOrder = Callable[[str, int, int, int], Sequence[Any] | None]
"""``(runner class, n, k, bucket) -> tactics in the enumerator's order``, or None."""

MAJORITY = "majority"
ENUMERATOR = "enumerator order"
TEXT = "text order"


def nested_tuple(tactic: Any) -> Any:
    return tuple(nested_tuple(t) for t in tactic) if isinstance(tactic, (list, tuple)) else tactic


def tactic_text(tactic: Any) -> str:
    """A tactic as compact JSON (lists for tuples), as tables and messages show it."""
    return json.dumps(tactic, separators=(",", ":"))


@dataclass(frozen=True)
class Vote:
    """A bucket on which the caches disagreed, and how it was decided."""

    runner: str
    n: int
    k: int
    bucket: int
    choices: tuple[tuple[Any, tuple[str, ...]], ...]
    """Each tactic and the caches that chose it, most chosen first."""
    chosen: Any
    rule: str

    def describe(self, where: str) -> str:
        """``where: [..] from a, b; [..] from c -> [..] (majority)``."""
        parts = [f"{tactic_text(t)} from {', '.join(labels)}" for t, labels in self.choices]
        return f"{where}: {'; '.join(parts)} -> {tactic_text(self.chosen)} ({self.rule})"


def _decide(
    key: tuple[str, int, int, int], votes: dict[Any, list[str]], order: TieOrder
) -> tuple[Any, str]:
    top = max(len(labels) for labels in votes.values())
    leaders = [t for t, labels in votes.items() if len(labels) == top]
    if len(leaders) == 1:
        return leaders[0], MAJORITY
    try:
        listed = order(*key)
    except Exception:
        listed = None
    if listed:
        position: dict[Any, int] = {}
        for index, tactic in enumerate(listed):
            position.setdefault(nested_tuple(tactic), index)
        ranked = [t for t in leaders if t in position]
        if ranked:
            return min(ranked, key=position.__getitem__), ENUMERATOR
    return min(leaders, key=tactic_text), TEXT


def merge(
    sources: Sequence[tuple[str, Sequence[TunedEntry]]], order: TieOrder
) -> tuple[list[TunedEntry], list[Vote], int]:
    """One entry per bucket over ``(label, entries)`` sources, the buckets they disagreed on,
    and the number of buckets."""
    by_key: dict[tuple[str, int, int, int], dict[Any, list[str]]] = {}
    for label, entries in sources:
        for e in entries:
            chosen = by_key.setdefault((e.runner, e.n, e.k, e.bucket), {})
            labels = chosen.setdefault(nested_tuple(e.tactic), [])
            if label not in labels:
                labels.append(label)
    merged: list[TunedEntry] = []
    votes: list[Vote] = []
    for key in sorted(by_key):
        choices = by_key[key]
        if len(choices) == 1:
            tactic = next(iter(choices))
        else:
            tactic, rule = _decide(key, choices, order)
            ranked = sorted(choices.items(), key=lambda item: (-len(item[1]), tactic_text(item[0])))
            votes.append(
                Vote(*key, tuple((t, tuple(labels)) for t, labels in ranked), tactic, rule)
            )
        merged.append(TunedEntry(key[0], key[1], key[2], key[3], tactic))
    return merged, votes, len(by_key)


def runner_order(sm_version: int) -> TieOrder:
    """Each runner's enumerator order on the device ``sm_version`` (see the module's rule 3)."""

    def order(runner: str, n: int, k: int, bucket: int) -> Sequence[Any] | None:
        if runner == LOW_LATENCY_CLASS:
            if fi.AUTOTUNE_TACTICS.probe() is not None:
                return None
            return fi.autotune_tactics(n, k, bucket)
        if runner == CUTE_DSL_CLASS:
            import torch

            from fi_patches.cute_dsl.runner import cute_dsl_runner
            from fi_patches.pinning.probe_inputs import mxfp8_runner_inputs

            cute = cute_dsl_runner(sm_version // 10, sm_version % 10, torch.bfloat16)
            listed: Sequence[Any] = cute.get_valid_tactics(mxfp8_runner_inputs(n, k, bucket), None)
            return listed
        if runner == WIDE_CLASS:
            from fi_patches.wide.tactics import pick_tile, wide_tactics

            tile = pick_tile(bucket)
            return [(tile, *t) for t in wide_tactics(n, k, tile)]
        return None

    return order


def provenance(
    labels: Sequence[str], votes: Sequence[Vote], buckets: int, where: Callable[[Vote], str]
) -> str:
    """The ``[meta] note`` of a merged table: how many buckets agreed, and each disagreement."""
    head = f"merged {len(labels)} tuner caches: {buckets - len(votes)} of {buckets} buckets agree"
    if not votes:
        return head
    listed = "; ".join(v.describe(where(v)) for v in votes[:20])
    more = f"; and {len(votes) - 20} more" if len(votes) > 20 else ""
    return (
        f"{head}, {len(votes)} disagree (majority, then enumerator order, then text order): "
        f"{listed}{more}"
    )
