"""The errors ``fi_patches.chain`` raises: a bad CHAIN.toml, a chain that cannot be tuned here,
and recorded measurements that do not cover what the selection asks for."""

from __future__ import annotations

from fi_patches.pins.errors import PinProblem


class ChainError(ValueError):
    """Base class of every error ``fi_patches.chain`` raises on purpose."""


class ChainSpecError(ChainError):
    """A CHAIN.toml that cannot be used; ``problems`` lists everything wrong with it, each
    naming the file, the entry, the field and its value."""

    def __init__(self, problems: list[PinProblem]) -> None:
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        head = "invalid chain" if len(lines) == 1 else f"invalid chain ({len(lines)} problems)"
        super().__init__(head + ":\n  " + "\n  ".join(lines))


class TuneError(ChainError):
    """The chain cannot be tuned as asked (an op offers no tactic, a timer cannot run here)."""


class ReplayError(TuneError):
    """A recorded-measurements file is unreadable or lacks a measurement the selection needs."""


class UpstreamError(ChainError):
    """A FlashInfer internal the chain adapters need is missing or changed (the reason says
    which)."""
