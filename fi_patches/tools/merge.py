"""Merge the winners of several FlashInfer tuner caches (one per rank, or several restarts)
into one winner per bucket, for ``pins record --from A --from B ...``, for every op.

FlashInfer's tuner keeps one winner per op and bucketed profile, filed under the winning
runner's key (its class and extras). So the decision the caches vote on is the op and profile
(:func:`~fi_patches.tools.record.decision_of`), and what each cache votes for is a
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

``pins diff``: what several tuner caches or pin tables choose per bucket, for every op, and
where they differ. A section entry's row range counts once per FlashInfer bucket it covers
(a ``[[wide]]`` entry, and a wide runner's cache entry, by its activation tile); a ``[[pin]]``
entry covers the op's buckets its shapes and row range match, and, compared with other tables,
its range's ends and the powers of two between them. Outside the sections a bucket is the op
and profile, and what is compared there is the runner and its tactic, as FlashInfer's tuner
keeps one winning runner per bucket: caches whose winners are different runners differ on the
same bucket. Runners tuned apart (one input holds winners of both for one bucket: the op called
with a ``backend`` argument) are compared each on its own, as ``pins record`` merges them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import SECTION as PIN
from fi_patches.pins.keys import (
    Profile,
    TunerKey,
    TunerPin,
    as_tactic,
    bucket_rows,
    runner_overlaps,
    tactic_text,
)
from fi_patches.pins.schema import LOW_LATENCY_MAX_ROWS
from fi_patches.pins.table import PinTable
from fi_patches.tools.record import (
    Apart,
    Decision,
    Tuned,
    decision_of,
    read_cache,
    runners_apart,
    section_of,
)
from fi_patches.wide.launch import CLASS_NAME as WIDE_CLASS

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
    """The bucket: op, profile and lane (see :func:`~fi_patches.tools.record.decision_of`)."""
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
    """One winner per bucket (:func:`~fi_patches.tools.record.decision_of`) over
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

            from fi_patches.cute_dsl import cute_dsl_runner
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
    from fi_patches._text import joined

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


BucketKey = tuple[Any, ...]
"""``(section, n, k, bucket)`` (for ``wide`` the last field is the tile), or
``("pin", op, profile, runner)``: an input's own winner, or, compared, the lane it decides
(the runner where it is tuned apart, else ``""``)."""


@dataclass(frozen=True)
class Won:
    """A ``[[pin]]`` bucket's winner: the runner and its tactic."""

    runner: str
    tactic: Any

    def text(self) -> str:
        return f"{self.runner} {tactic_text(self.tactic)}"


@dataclass
class Choices:
    """One input's tactic per key, and the ``[[pin]]`` entries that cover keys by pattern."""

    found: dict[BucketKey, Any] = field(default_factory=dict)
    pins: list[TunerPin] = field(default_factory=list)

    def placements(self) -> list[tuple[str, Profile, str]]:
        """``(op, profile, runner)`` of each ``[[pin]]`` winner of a cache."""
        return [(k[1], k[2], k[3]) for k in self.found if k[0] == PIN]

    def lanes(self, apart: Apart) -> dict[BucketKey, Any]:
        """``found`` with each ``[[pin]]`` winner under the lane it decides."""
        return {_lane(k, apart): v for k, v in self.found.items()}

    def covering(self, key: BucketKey, apart: Apart) -> Any:
        """What this input's ``[[pin]]`` entries pin for the lane ``key``, or None."""
        _, op, profile, lane = key
        for pin in self.pins:
            mine = pin.runner in apart.get(op, ())
            if (pin.runner == lane if lane else not mine) and _covers(pin, op, profile):
                return Won(pin.runner, pin.tactic)
        return None


def _lane(key: BucketKey, apart: Apart) -> BucketKey:
    """A ``[[pin]]`` key under its lane: its runner where tuned apart, else ``""``."""
    if key[0] != PIN:
        return key
    _, op, profile, runner = key
    return PIN, op, profile, runner if runner in apart.get(op, ()) else ""


def _covers(pin: TunerPin, op: str, profile: Profile) -> bool:
    """Whether ``pin`` pins the bucket ``profile`` of ``op``."""
    if pin.op != op or pin.shapes.masked(profile) != pin.shapes.fixed():
        return False
    rows = pin.shapes.rows_of(profile)
    return rows is not None and pin.covers(rows)


def from_entries(entries: Iterable[Tuned], bucket_of: Callable[[int], int] | None) -> Choices:
    """The tactic per key of tuner-cache entries (as ``pins record`` would pin them)."""
    found = Choices()
    for e in entries:
        section = section_of(e.key) if bucket_of is not None else None
        tactic = as_tactic(e.tactic)
        if section is None:
            found.found[(PIN, e.key.op, e.key.profile, e.key.runner)] = Won(e.key.runner, tactic)
        elif section.section == "wide":
            found.found[("wide", section.n, section.k, int(tactic[0]))] = tactic[1:]
        elif section.section != "low_latency" or section.bucket <= LOW_LATENCY_MAX_ROWS:
            found.found[(section.section, section.n, section.k, section.bucket)] = tactic
    return found


def pin_keys(pin: TunerPin) -> list[TunerKey]:
    """Concrete keys standing for a ``[[pin]]`` entry where no cache names them."""
    if not pin.shapes.has_rows:
        values = [0]
    else:
        values = sorted(
            {pin.min_rows, pin.max_rows}
            | {1 << i for i in range(pin.max_rows.bit_length()) if pin.min_rows <= 1 << i}
        )
        values = [v for v in values if pin.min_rows <= v <= pin.max_rows]
    keys = []
    for value in values:
        profile = tuple(
            tuple(value if d == "rows" else (-1 if d == "*" else int(d)) for d in shape)
            for shape in pin.shapes.dims
        )
        keys.append(TunerKey(pin.op, pin.runner, profile, pin.extras or "*"))
    return keys


def _pin_buckets(pin: TunerPin) -> list[BucketKey]:
    """:func:`pin_keys` as the buckets a diff compares."""
    return [(PIN, key.op, key.profile, key.runner) for key in pin_keys(pin)]


class NeedsBuckets(ValueError):
    """A table's row ranges must be split into FlashInfer's tuner buckets, and no bucket map is
    at hand (FlashInfer is not installed); the message names the file and the sections."""


def from_table(table: PinTable, bucket_of: Callable[[int], int] | None) -> Choices:
    """The tactic per key of a pin table; raises :class:`NeedsBuckets` for a table with
    ``[[low_latency]]`` or ``[[cute_dsl]]`` entries when ``bucket_of`` is None."""
    found = Choices(pins=list(table.entries(PIN)))
    bucketed = [s for s in ("low_latency", "cute_dsl") if table.entries(s)]
    if bucketed and bucket_of is None:
        raise NeedsBuckets(
            f"{table.source}: comparing its {' and '.join(f'[[{s}]]' for s in bucketed)} "
            "entries needs FlashInfer's tuner buckets"
        )
    if bucket_of is not None:
        for section in bucketed:
            for entry in table.entries(section):
                buckets = {bucket_of(rows) for rows in range(entry.min_rows, entry.max_rows + 1)}
                for bucket in sorted(buckets):
                    found.found[(section, entry.n, entry.k, bucket)] = as_tactic(entry.tactic)
    for entry in table.entries("wide"):
        found.found[("wide", entry.n, entry.k, entry.tile)] = as_tactic(entry.tactic)
    return found


def read_choices(path: str, bucket_of: Callable[[int], int] | None) -> Choices:
    """The choices of a tuner cache (v1 file, v2 store directory) or a pin table (``.toml``,
    or ``.json`` with a ``meta`` table); raises ``TunerCacheError`` or ``PinTableError``."""
    location = Path(path)
    if location.suffix.lower() == ".toml":
        return from_table(PinTable.from_file(location), bucket_of)
    if location.suffix.lower() == ".json" and location.is_file():
        try:
            data = json.loads(location.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            data = None  # read_cache names the problem
        if isinstance(data, dict) and "meta" in data:
            return from_table(PinTable.from_mapping(data, source=str(location)), bucket_of)
    entries, _ = read_cache(location)
    return from_entries(entries, bucket_of)


@dataclass(frozen=True)
class BucketDiff:
    key: BucketKey
    values: tuple[Any, ...]
    """Each input's tactic, None where the input has no entry for the key."""


def differing(choices: Sequence[Choices]) -> tuple[list[BucketDiff], int]:
    """The keys whose tactic (and runner) is not the same in every input (an input without the
    key differs too), and the number of keys in any input. Runners tuned apart in any input
    (:func:`~fi_patches.tools.record.runners_apart`; in a table, two runners pinning one bucket)
    are compared each on its own; other runners of an op are one lane per bucket."""
    apart = runners_apart(found.placements() for found in choices)
    for found in choices:
        for first, second in runner_overlaps(found.pins):
            apart.setdefault(first.op, set()).update((first.runner, second.runner))
    own = [found.lanes(apart) for found in choices]
    keys = {key for found in own for key in found}
    if not any(k[0] == PIN for k in keys):
        keys |= {
            _lane(k, apart) for found in choices for pin in found.pins for k in _pin_buckets(pin)
        }
    ordered = sorted(keys, key=_natural)
    diffs = []
    for key in ordered:
        values = tuple(
            mine[key] if key in mine else found.covering(key, apart) if key[0] == PIN else None
            for found, mine in zip(choices, own, strict=True)
        )
        if len({repr(v) for v in values}) > 1:
            diffs.append(BucketDiff(key, values))
    return diffs, len(ordered)


def _natural(value: Any) -> tuple[Any, ...]:
    """A sort key that orders numbers by value, not by their text (rows 2 before rows 9..16),
    whatever mix of sections, names and profiles the keys hold."""
    if isinstance(value, bool) or not isinstance(value, (int, str, tuple)):
        return (3, repr(value))
    if isinstance(value, int):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    return (2, tuple(_natural(part) for part in value))


def bucket_label(key: BucketKey, bucket_of: Callable[[int], int] | None) -> str:
    """``low_latency 7168x1536 rows 5..8``, ``wide 7168x1536 tile 16``, or a ``[[pin]]``
    bucket as ``op profile`` (then its runner, where it is tuned apart)."""
    if key[0] == PIN:
        _, op, profile, lane = key
        return f"{op} {list(map(list, profile))}" + (f" {lane}" if lane else "")
    section, n, k, bucket = key
    if section == "wide":
        return f"wide {n}x{k} tile {bucket}"
    lo, hi = bucket_rows(bucket_of, bucket) if bucket_of is not None else (bucket, bucket)
    rows = str(lo) if lo == hi else f"{lo}..{hi}"
    return f"{section} {n}x{k} rows {rows}"


def cell_text(value: Any) -> str:
    """A cell of the diff: ``-`` for no entry, ``runner tactic`` for a ``[[pin]]`` bucket."""
    if isinstance(value, Won):
        return value.text()
    return "-" if value is None else tactic_text(value)
