"""Merge the winners of several FlashInfer tuner caches (one per rank, or several restarts)
into one winner per bucket, for ``pins record --from A --from B ...``, for every op.

FlashInfer's tuner keeps one winner per op and bucketed profile, filed under the winning
runner's key (its class and extras). So the decision the caches vote on is the op and profile
(:func:`~fi_patches.pins.record.decision_of`), and what each cache votes for is a
:class:`Choice`: the runner, its extras and its tactic. Two caches whose winners are different
runners disagree on that bucket, as two that chose different tactics of one runner do. Runners
that one cache holds winners of for one bucket were tuned by separate calls (an op called with a
``backend`` argument), and the MXFP8 sections pin each of their runners on its own: each such
runner's buckets are voted on apart. The rule, per bucket, over the caches that tuned it:

1. every cache chose the same runner and tactic: that choice;
2. otherwise the choice most caches made (the majority);
3. a tie between tactics of one runner goes to the tied tactic that comes first in that
   runner's own enumerator order, where fi_patches can list it: FlashInfer's
   ``autotune_tactics`` for the low-latency runner, the cute-dsl runner's ``get_valid_tactics``
   (it needs the device's SM count, so off the device this step is skipped), fi_patches' own
   ``wide_tactics`` for the wide runner. That is the order FlashInfer would try them in;
4. still tied (or tied between runners): the runner whose name sorts first, then its extras'
   text, then the tactic whose JSON text sorts first.

The outcome depends only on the caches' contents, never on the order of ``--from``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import TunerKey, as_tactic, tactic_text
from fi_patches.pins.record import Decision, Tuned, decision_of, runners_apart, section_of
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
class Choice:
    """What one cache chose for a bucket: the winning runner, its extras and its tactic."""

    runner: str
    extras: str
    tactic: Any

    @staticmethod
    def of(entry: Tuned) -> Choice:
        return Choice(entry.key.runner, entry.key.extras, as_tactic(entry.tactic))

    def order(self) -> tuple[str, str, str]:
        """The text order of rule 4."""
        return self.runner, self.extras, tactic_text(self.tactic)


@dataclass(frozen=True)
class Vote:
    """A bucket on which the caches disagreed, and how it was decided."""

    decision: Decision
    """The bucket: op, profile and lane (see :func:`~fi_patches.pins.record.decision_of`)."""
    key: TunerKey
    """The chosen runner's key for the bucket."""
    choices: tuple[tuple[Choice, tuple[str, ...]], ...]
    """Each choice and the caches that made it, most made first."""
    chosen: Choice
    rule: str

    @property
    def tuned(self) -> Tuned:
        """The winner, as a cache entry."""
        return Tuned(self.key, self.chosen.tactic)

    @property
    def runners_differ(self) -> bool:
        """Whether the caches chose different runners (or extras) for the bucket."""
        return len({(c.runner, c.extras) for c, _ in self.choices}) > 1

    def _text(self, choice: Choice) -> str:
        if not self.runners_differ:
            return tactic_text(choice.tactic)
        extras = len({c.extras for c, _ in self.choices if c.runner == choice.runner}) > 1
        runner = f"{choice.runner} {choice.extras}" if extras else choice.runner
        return f"{runner} {tactic_text(choice.tactic)}"

    def describe(self, where: str) -> str:
        """``where: [..] from a, b; [..] from c -> [..] (majority)``, each choice led by its
        runner where the caches chose different runners."""
        parts = [f"{self._text(c)} from {', '.join(labels)}" for c, labels in self.choices]
        return f"{where}: {'; '.join(parts)} -> {self._text(self.chosen)} ({self.rule})"


def _decide(
    bucket: Decision, votes: dict[Choice, list[str]], order: TieOrder
) -> tuple[Choice, str]:
    top = max(len(labels) for labels in votes.values())
    leaders = [c for c, labels in votes.items() if len(labels) == top]
    if len(leaders) == 1:
        return leaders[0], MAJORITY
    runners = {(c.runner, c.extras) for c in leaders}
    if len(runners) == 1:
        runner, extras = runners.pop()
        try:
            listed = order(TunerKey(bucket[0], runner, bucket[1], extras))
        except Exception:
            listed = None
        if listed:
            position: dict[Any, int] = {}
            for index, tactic in enumerate(listed):
                position.setdefault(as_tactic(tactic), index)
            ranked = [c for c in leaders if c.tactic in position]
            if ranked:
                return min(ranked, key=lambda c: position[c.tactic]), ENUMERATOR
    return min(leaders, key=Choice.order), TEXT


def merge(
    sources: Sequence[tuple[str, Sequence[Tuned]]], order: TieOrder
) -> tuple[list[Tuned], list[Vote], int]:
    """One winner per bucket (:func:`~fi_patches.pins.record.decision_of`) over
    ``(label, entries)`` sources, the buckets they disagreed on (runner or tactic), and the
    number of buckets."""
    apart = runners_apart(
        [(e.key.op, e.key.profile, e.key.runner) for e in entries] for _, entries in sources
    )
    by_bucket: dict[Decision, dict[Choice, list[str]]] = {}
    for label, entries in sources:
        for e in entries:
            chosen = by_bucket.setdefault(decision_of(e.key, apart), {})
            labels = chosen.setdefault(Choice.of(e), [])
            if label not in labels:
                labels.append(label)
    merged: list[Tuned] = []
    votes: list[Vote] = []
    for bucket, choices in by_bucket.items():
        op, profile, _ = bucket
        rule = ""
        if len(choices) == 1:
            choice = next(iter(choices))
        else:
            choice, rule = _decide(bucket, choices, order)
        key = TunerKey(op, choice.runner, profile, choice.extras)
        if rule:
            ranked = sorted(choices.items(), key=lambda item: (-len(item[1]), item[0].order()))
            ranking = tuple((c, tuple(labels)) for c, labels in ranked)
            votes.append(Vote(bucket, key, ranking, choice, rule))
        merged.append(Tuned(key, choice.tactic))
    merged.sort(key=lambda e: decision_of(e.key, apart))
    votes.sort(key=lambda v: v.decision)
    return merged, votes, len(by_bucket)


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
            from fi_patches.pinning.serving import mxfp8_runner_inputs

            cute = cute_dsl_runner(sm_version // 10, sm_version % 10, torch.bfloat16)
            listed: Sequence[Any] = cute.get_valid_tactics(mxfp8_runner_inputs(n, k, bucket), None)
            return listed
        if key.runner == WIDE_CLASS:
            from fi_patches.wide.tactics import pick_tile, wide_tactics

            tile = pick_tile(bucket)
            return [(tile, *t) for t in wide_tactics(n, k, tile)]
        return None

    return order


def rule_counts(votes: Sequence[Vote]) -> str:
    """How many disagreements each rule decided, in the order the rules apply: ``12 by
    majority, 18 by enumerator order`` (rules that decided none left out)."""
    from fi_patches._words import joined

    made = [
        (rule, sum(1 for v in votes if v.rule == rule)) for rule in (MAJORITY, ENUMERATOR, TEXT)
    ]
    return joined([f"{count} by {rule}" for rule, count in made if count])


def provenance(
    labels: Sequence[str], votes: Sequence[Vote], buckets: int, where: Callable[[Vote], str]
) -> str:
    """The ``[meta] note`` of a merged table: how many buckets agreed, how many each rule
    decided, then each disagreement on a line of its own (inputs named as given)."""
    head = f"merged {len(labels)} tuner caches: {buckets - len(votes)} of {buckets} buckets agree"
    if not votes:
        return head
    from fi_patches.pins.schema import TEXT_MAX

    intro = f"{head}; {len(votes)} disagree, decided {rule_counts(votes)}:"
    # as many disagreements as the note holds, the count of the rest after them
    budget = TEXT_MAX - len(intro) - len(f"\nand {len(votes)} more")
    shown: list[str] = []
    for vote in votes:
        text = vote.describe(where(vote))
        if sum(len(t) + 1 for t in shown) + len(text) + 1 > budget:
            break
        shown.append(text)
    more = [f"and {len(votes) - len(shown)} more"] if len(votes) > len(shown) else []
    return "\n".join([intro, *shown, *more])
