"""What a tuning run measured and why it chose what it chose: per-candidate medians and spreads,
every coordinate-descent step, which choices were ties and the rule that settled them. The
full record goes to a JSON sidecar; :func:`summary` is the one line a pin table's ``note``
holds."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fi_patches.chain.spec import Bucket, Settings
from fi_patches.pins.keys import tactic_json

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
