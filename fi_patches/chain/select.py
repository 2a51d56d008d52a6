"""Choosing tactics per row bucket by coordinate descent over the ops of a chain.

Each coordinate (the ops sharing one pin) is chosen with the others fixed: its candidates are
timed in the chain, interleaved and repeated, and the fastest median wins unless other
candidates are within the tie tolerance. A tie goes to the current pin, else to the first
tied candidate in the runner's own (enumerator) order. Passes repeat until one changes
nothing; a coordinate whose fixed context has not changed since it was chosen is not timed
again. ``isolated=True`` instead times each coordinate's ops alone, once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fi_patches._logging import get_logger
from fi_patches.chain.errors import ChainError, TuneError
from fi_patches.chain.ops import Op
from fi_patches.chain.provenance import (
    CURRENT_PIN,
    ENUMERATOR_ORDER,
    FASTEST,
    BucketResult,
    Stats,
    Step,
)
from fi_patches.chain.spec import Bucket, Settings
from fi_patches.chain.timing import Timed, Timer, Trial

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
