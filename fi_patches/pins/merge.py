"""Merge the winners of several FlashInfer tuner caches (one per rank, or several restarts)
into one winner per tuner key, for ``pins record --from A --from B ...``, for every op.

The rule, per key, over the caches that tuned that key:

1. every cache chose the same tactic: that tactic;
2. otherwise the tactic most caches chose (the majority);
3. a tie goes to the tied tactic that comes first in the runner's own enumerator order, where
   fi_patches can list it: FlashInfer's ``autotune_tactics`` for the low-latency runner, the
   cute-dsl runner's ``get_valid_tactics`` (it needs the device's SM count, so off the device
   this step is skipped), fi_patches' own ``wide_tactics`` for the wide runner. That is the order
   FlashInfer would try them in;
4. still tied: the tactic whose JSON text sorts first.

The outcome depends only on the caches' contents, never on the order of ``--from``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import TunerKey, as_tactic, tactic_text
from fi_patches.pins.record import Tuned, section_of
from fi_patches.wide.runner import CLASS_NAME as WIDE_CLASS

LOW_LATENCY_CLASS = fi.LOW_LATENCY_RUNNER.builds
CUTE_DSL_CLASS = fi.CUTE_DSL_RUNNER.builds

TieOrder = Callable[[TunerKey], Sequence[Any] | None]
"""``key -> tactics in the runner's enumerator order``, or None where fi_patches cannot list
them."""

MAJORITY = "majority"
ENUMERATOR = "enumerator order"
TEXT = "text order"


@dataclass(frozen=True)
class Vote:
    """A key on which the caches disagreed, and how it was decided."""

    key: TunerKey
    choices: tuple[tuple[Any, tuple[str, ...]], ...]
    """Each tactic and the caches that chose it, most chosen first."""
    chosen: Any
    rule: str

    def describe(self, where: str) -> str:
        """``where: [..] from a, b; [..] from c -> [..] (majority)``."""
        parts = [f"{tactic_text(t)} from {', '.join(labels)}" for t, labels in self.choices]
        return f"{where}: {'; '.join(parts)} -> {tactic_text(self.chosen)} ({self.rule})"


def _decide(key: TunerKey, votes: dict[Any, list[str]], order: TieOrder) -> tuple[Any, str]:
    top = max(len(labels) for labels in votes.values())
    leaders = [t for t, labels in votes.items() if len(labels) == top]
    if len(leaders) == 1:
        return leaders[0], MAJORITY
    try:
        listed = order(key)
    except Exception:
        listed = None
    if listed:
        position: dict[Any, int] = {}
        for index, tactic in enumerate(listed):
            position.setdefault(as_tactic(tactic), index)
        ranked = [t for t in leaders if t in position]
        if ranked:
            return min(ranked, key=position.__getitem__), ENUMERATOR
    return min(leaders, key=tactic_text), TEXT


def merge(
    sources: Sequence[tuple[str, Sequence[Tuned]]], order: TieOrder
) -> tuple[list[Tuned], list[Vote], int]:
    """One entry per key over ``(label, entries)`` sources, the keys they disagreed on, and the
    number of keys."""
    by_key: dict[TunerKey, dict[Any, list[str]]] = {}
    for label, entries in sources:
        for e in entries:
            chosen = by_key.setdefault(e.key, {})
            labels = chosen.setdefault(as_tactic(e.tactic), [])
            if label not in labels:
                labels.append(label)
    merged: list[Tuned] = []
    votes: list[Vote] = []
    for key in sorted(by_key, key=lambda k: k.file_key):
        choices = by_key[key]
        if len(choices) == 1:
            tactic = next(iter(choices))
        else:
            tactic, rule = _decide(key, choices, order)
            ranked = sorted(choices.items(), key=lambda item: (-len(item[1]), tactic_text(item[0])))
            votes.append(Vote(key, tuple((t, tuple(labels)) for t, labels in ranked), tactic, rule))
        merged.append(Tuned(key, tactic))
    return merged, votes, len(by_key)


def runner_order(sm_version: int) -> TieOrder:
    """Each section runner's enumerator order on the device ``sm_version`` (see the module's
    rule 3); None for other keys."""

    def order(key: TunerKey) -> Sequence[Any] | None:
        found = section_of(key)
        if found is None:
            return None
        n, k, bucket = found.n, found.k, found.bucket
        if key.runner == LOW_LATENCY_CLASS:
            if fi.AUTOTUNE_TACTICS.probe() is not None:
                return None
            return fi.autotune_tactics(n, k, bucket)
        if key.runner == CUTE_DSL_CLASS:
            import torch

            from fi_patches.cute_dsl.runner import cute_dsl_runner
            from fi_patches.pinning.probe_inputs import mxfp8_runner_inputs

            cute = cute_dsl_runner(sm_version // 10, sm_version % 10, torch.bfloat16)
            listed: Sequence[Any] = cute.get_valid_tactics(mxfp8_runner_inputs(n, k, bucket), None)
            return listed
        if key.runner == WIDE_CLASS:
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
    from fi_patches.pins.schema import TEXT_MAX

    intro = f"{head}, {len(votes)} disagree (majority, then enumerator order, then text order): "
    # as many disagreements as the note holds, the count of the rest after them
    budget = TEXT_MAX - len(intro) - len(f"; and {len(votes)} more")
    shown: list[str] = []
    for vote in votes[:20]:
        text = vote.describe(where(vote))
        if sum(len(t) + 2 for t in shown) + len(text) > budget:
            break
        shown.append(text)
    more = f"; and {len(votes) - len(shown)} more" if len(votes) > len(shown) else ""
    return f"{intro}{'; '.join(shown)}{more}"
