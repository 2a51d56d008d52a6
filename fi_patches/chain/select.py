"""Choosing tactics per row bucket by coordinate descent over the ops of a chain.

Each coordinate (the ops sharing one pin) is chosen with the others fixed: its candidates are
timed in the chain, interleaved and repeated, and the fastest median wins unless other
candidates are within the tie tolerance. A tie goes to the current pin, else to the first
tied candidate in the runner's own (enumerator) order. Passes repeat until one changes
nothing; a coordinate whose fixed context has not changed since it was chosen is not timed
again. ``isolated=True`` instead times each coordinate's ops alone, once.

What a tuning run measured and why it chose what it chose: per-candidate medians and spreads,
every coordinate-descent step, which choices were ties and the rule that settled them. The
full record goes to a JSON sidecar; :func:`summary` is the one line a pin table's ``note``
holds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fi_patches._logging import get_logger
from fi_patches.chain.ops import Op
from fi_patches.chain.spec import Bucket, ChainError, Settings, TuneError
from fi_patches.chain.timing import Timed, Timer, Trial
from fi_patches.pins.keys import tactic_json

logger = get_logger(__name__)

Progress = Callable[[int, int, str], None]
"""Called as ``progress(advance, total, label)`` as samples are taken; ``total`` grows when
another pass is needed."""


@dataclass(frozen=True)
class Slot:
    """One op of the chain at one bucket. Slots with the same ``coordinate`` share a tactic
    (they share a pin, e.g. two ops of one weight shape); ``pin`` is the coordinate's current
    pin as the op spells its tactics, or None."""

    name: str
    coordinate: str
    op: Op
    pin: Any = None


def choose(
    candidates: Sequence[Stats], tolerance: float, pin: Any
) -> tuple[Any, tuple[Any, ...], str]:
    """``(chosen, tied, rule)``: the fastest median, unless others are within ``tolerance`` of
    it (relative); then the current ``pin`` if tied, else the first tied one in order."""
    best = min(s.median for s in candidates)
    tied = tuple(s.tactic for s in candidates if s.median <= best * (1.0 + tolerance))
    if len(tied) == 1:
        return tied[0], tied, FASTEST
    if pin is not None and pin in tied:
        return pin, tied, CURRENT_PIN
    return tied[0], tied, ENUMERATOR_ORDER


class _Counter:
    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.total = 0

    def expect(self, samples: int) -> None:
        self.total += samples

    def advance(self, label: str) -> None:
        if self.progress is not None:
            self.progress(1, self.total, label)


def measure(
    trials: Sequence[Trial], timer: Timer, repeats: int, advance: Callable[[], None] | None = None
) -> list[list[float]]:
    """``repeats`` samples of every trial, interleaved: each round samples every trial once,
    starting one later than the round before, so no trial always runs first."""
    prepared: list[Timed] = []
    try:
        for trial in trials:
            prepared.append(timer.prepare(trial))
        samples: list[list[float]] = [[] for _ in trials]
        for round_number in range(repeats):
            for offset in range(len(trials)):
                i = (round_number + offset) % len(trials)
                samples[i].append(float(prepared[i].sample()))
                if advance is not None:
                    advance()
        return samples
    finally:
        for timed in prepared:
            timed.close()


def _listed(slot: Slot, rows: int) -> list[Any]:
    try:
        return list(slot.op.tactics(rows))
    except ChainError:
        raise
    except Exception as exc:
        raise TuneError(
            f"{slot.op!r} (op {slot.name!r}) could not list its tactics at {rows} rows "
            f"({type(exc).__name__}: {exc})"
        ) from exc


def candidates_for(bucket: Bucket, slots: Sequence[Slot], limit: int) -> list[Any]:
    """The tactics every slot of one coordinate offers at the bucket's measured rows and at
    both ends of its range, in the first slot's order; the first ``limit`` (0: all) plus the
    current pin."""
    first = slots[0]
    offered = _listed(first, bucket.rows)
    for slot in slots:
        for rows in dict.fromkeys((bucket.rows, bucket.min_rows, bucket.max_rows)):
            if slot is first and rows == bucket.rows:
                continue
            also = set(_listed(slot, rows))
            offered = [t for t in offered if t in also]
    if not offered:
        names = ", ".join(s.name for s in slots)
        raise TuneError(f"{names} offer no tactic for rows {bucket.label} ({first.op!r})")
    if limit and len(offered) > limit:
        kept = offered[:limit]
        if first.pin is not None and first.pin in offered and first.pin not in kept:
            kept.append(first.pin)
        offered = kept
    return offered


class _BucketTuner:
    def __init__(
        self,
        bucket: Bucket,
        slots: Sequence[Slot],
        timer: Timer,
        settings: Settings,
        counter: _Counter,
    ) -> None:
        self.bucket, self.slots, self.timer = bucket, tuple(slots), timer
        self.settings, self.counter = settings, counter
        self.coordinates = list(dict.fromkeys(s.coordinate for s in slots))
        self.members = {c: [s for s in slots if s.coordinate == c] for c in self.coordinates}
        self.candidates = {
            c: candidates_for(bucket, self.members[c], settings.max_candidates)
            for c in self.coordinates
        }
        self.pins = {
            c: self.members[c][0].pin if self.members[c][0].pin in self.candidates[c] else None
            for c in self.coordinates
        }
        self.current = {
            c: self.pins[c] if self.pins[c] is not None else self.candidates[c][0]
            for c in self.coordinates
        }
        self.steps: list[Step] = []

    def samples_per_step(self, coordinate: str) -> int:
        return len(self.candidates[coordinate]) * self.settings.repeats

    def step(self, pass_number: int, coordinate: str, isolated: bool) -> Step:
        slots = self.members[coordinate] if isolated else list(self.slots)
        trials = [
            Trial(
                self.bucket.rows,
                tuple(s.name for s in slots),
                tuple(
                    t if s.coordinate == coordinate else self.current[s.coordinate] for s in slots
                ),
                tuple(s.op for s in slots),
            )
            for t in self.candidates[coordinate]
        ]
        label = f"rows {self.bucket.label}, {coordinate}"
        samples = measure(
            trials, self.timer, self.settings.repeats, lambda: self.counter.advance(label)
        )
        stats = tuple(
            Stats(t, tuple(s)) for t, s in zip(self.candidates[coordinate], samples, strict=True)
        )
        chosen, tied, rule = choose(stats, self.settings.tie_tolerance, self.pins[coordinate])
        context = tuple((c, self.current[c]) for c in self.coordinates if c != coordinate)
        made = Step(pass_number, coordinate, () if isolated else context, stats, chosen, tied, rule)
        self.steps.append(made)
        return made

    def result(self, mode: str, passes: int, converged: bool) -> BucketResult:
        return BucketResult(
            self.bucket,
            mode,
            tuple((s.name, s.coordinate) for s in self.slots),
            dict(self.pins),
            dict(self.current),
            tuple(self.steps),
            passes,
            converged,
        )

    def isolated(self) -> BucketResult:
        for coordinate in self.coordinates:
            self.current[coordinate] = self.step(1, coordinate, isolated=True).chosen
        return self.result("isolated", 1, True)

    def descend(self) -> BucketResult:
        chosen_in: dict[str, tuple[Any, ...]] = {}
        passes = 0
        for pass_number in range(1, self.settings.max_passes + 1):
            changed = measured = False
            for coordinate in self.coordinates:
                context = tuple(self.current[c] for c in self.coordinates if c != coordinate)
                if chosen_in.get(coordinate) == context:
                    continue
                if pass_number > 1:
                    self.counter.expect(self.samples_per_step(coordinate))
                step = self.step(pass_number, coordinate, isolated=False)
                chosen_in[coordinate] = context
                measured = True
                if step.chosen != self.current[coordinate]:
                    self.current[coordinate] = step.chosen
                    changed = True
            passes += int(measured)
            if not changed:
                return self.result("chain", passes, True)
        logger.warning(
            "coordinate descent at rows %s still changed a choice in pass %d of %d; keeping "
            "the last choices (raise max_passes to continue)",
            self.bucket.label,
            passes,
            self.settings.max_passes,
        )
        return self.result("chain", passes, False)


def tune(
    plan: Sequence[tuple[Bucket, Sequence[Slot]]],
    timer: Timer,
    settings: Settings,
    *,
    isolated: bool = False,
    progress: Progress | None = None,
) -> list[BucketResult]:
    """Choose a tactic per coordinate for each ``(bucket, slots)`` of ``plan``. A timer with a
    ``listing(op)`` method answers or watches what each op offers (a replay offers the
    recorded candidates, a recording keeps them)."""
    listing = getattr(timer, "listing", None)
    if callable(listing):
        listed: dict[int, Any] = {}
        for _, slots in plan:
            for slot in slots:
                if id(slot.op) not in listed:
                    listed[id(slot.op)] = listing(slot.op)
        plan = [(b, [replace(s, op=listed[id(s.op)]) for s in slots]) for b, slots in plan]
    counter = _Counter(progress)
    tuners = [_BucketTuner(b, slots, timer, settings, counter) for b, slots in plan]
    for tuner in tuners:
        for coordinate in tuner.coordinates:
            counter.expect(tuner.samples_per_step(coordinate))
    results = []
    for tuner in tuners:
        results.append(tuner.isolated() if isolated else tuner.descend())
        logger.info("rows %s: %s", tuner.bucket.label, results[-1].chosen)
    return results


FASTEST, CURRENT_PIN, ENUMERATOR_ORDER = "fastest", "current pin", "enumerator order"
"""How a choice was made: the one fastest candidate, or among tied candidates the current pin,
else the first in the runner's own (enumerator) order."""


@dataclass(frozen=True)
class Stats:
    """The samples of one candidate (microseconds), summarised."""

    tactic: Any
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples))

    @property
    def spread(self) -> float:
        """``(max - min) / median`` of the samples: how far apart repeated measurements were."""
        median = self.median
        return (max(self.samples) - min(self.samples)) / median if median > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "tactic": tactic_json(self.tactic),
            "median_us": round(self.median, 4),
            "min_us": round(min(self.samples), 4),
            "max_us": round(max(self.samples), 4),
            "spread": round(self.spread, 4),
            "samples": len(self.samples),
        }


@dataclass(frozen=True)
class Step:
    """One coordinate chosen with the others fixed at ``context``."""

    pass_number: int
    coordinate: str
    context: tuple[tuple[str, Any], ...]
    candidates: tuple[Stats, ...]
    chosen: Any
    tied: tuple[Any, ...]
    rule: str

    @property
    def tie(self) -> bool:
        return len(self.tied) > 1

    @property
    def best(self) -> Stats:
        return min(self.candidates, key=lambda s: s.median)

    def stats_of(self, tactic: Any) -> Stats:
        return next(s for s in self.candidates if s.tactic == tactic)

    def to_json(self) -> dict[str, Any]:
        return {
            "pass": self.pass_number,
            "coordinate": self.coordinate,
            "others": {name: tactic_json(t) for name, t in self.context},
            "chosen": tactic_json(self.chosen),
            "best": tactic_json(self.best.tactic),
            "tie": self.tie,
            "tied": [tactic_json(t) for t in self.tied],
            "rule": self.rule,
            "candidates": [s.to_json() for s in self.candidates],
        }


@dataclass(frozen=True)
class BucketResult:
    """The choices for one row bucket and the steps that led to them."""

    bucket: Bucket
    mode: str
    slots: tuple[tuple[str, str], ...]
    """``(op name, coordinate)`` in launch order."""
    pins: dict[str, Any]
    """The current pin of each coordinate (None: none, or not offered)."""
    chosen: dict[str, Any]
    steps: tuple[Step, ...]
    passes: int
    converged: bool

    def final_step(self, coordinate: str) -> Step:
        return [s for s in self.steps if s.coordinate == coordinate][-1]

    def ties(self) -> list[str]:
        """Coordinates whose final choice was among tied candidates."""
        return [c for c in self.chosen if self.final_step(c).tie]

    @property
    def chain_median_us(self) -> float | None:
        """The median time of the chosen chain (chain mode; its last step measured it)."""
        if self.mode != "chain" or not self.steps:
            return None
        last = self.steps[-1]
        return last.stats_of(last.chosen).median

    def to_json(self) -> dict[str, Any]:
        return {
            "min_rows": self.bucket.min_rows,
            "max_rows": self.bucket.max_rows,
            "rows": self.bucket.rows,
            "mode": self.mode,
            "passes": self.passes,
            "converged": self.converged,
            "chain_median_us": None
            if self.chain_median_us is None
            else round(self.chain_median_us, 4),
            "chosen": {c: tactic_json(t) for c, t in self.chosen.items()},
            "ties": self.ties(),
            "current_pins": {c: tactic_json(t) for c, t in self.pins.items()},
            "slots": [{"op": name, "coordinate": c} for name, c in self.slots],
            "steps": [s.to_json() for s in self.steps],
        }


def settings_json(settings: Settings) -> dict[str, Any]:
    return {
        "repeats": settings.repeats,
        "replays": settings.replays,
        "warmup": settings.warmup,
        "cold_l2": settings.cold_l2,
        "tie_tolerance": settings.tie_tolerance,
        "max_passes": settings.max_passes,
        "max_candidates": settings.max_candidates,
    }


def summary(
    chain: str,
    ops: Sequence[str],
    results: Sequence[BucketResult],
    settings: Settings,
    sidecar: str | None,
) -> str:
    """One line for a pin table's ``note``: the chain, buckets, measurement, ties, sidecar."""
    mode = results[0].mode if results else "chain"
    buckets = []
    for r in results:
        time = f" {r.chain_median_us:.1f}us" if r.chain_median_us is not None else ""
        flags = "" if r.converged else " (not converged)"
        buckets.append(f"{r.bucket.label}{time}{flags}")
    ties = sum(len(r.ties()) for r in results)
    text = (
        f"tuned {'in the chain' if mode == 'chain' else 'each op alone'} {chain}: "
        f"{' -> '.join(ops)}; buckets {', '.join(buckets)}; "
        f"{settings.repeats} interleaved repeats x {settings.replays} replays, "
        f"{'cold' if settings.cold_l2 else 'warm'} L2, tie tolerance {settings.tie_tolerance:g}; "
        f"{ties} tied choice{'s' if ties != 1 else ''}"
    )
    if sidecar:
        text += f"; provenance in {sidecar}"
    return text
