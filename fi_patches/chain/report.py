"""``validate``'s report: one record per check (passed, failed, or not run with the reason),
written as markdown for people and JSON for tools."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"

FORMAT = "fi_patches.validate/1"


@dataclass(frozen=True)
class Check:
    """One check: ``kind`` (numerics, wide launches, chain time), what it checks, its state and
    the detail (the reason when not run)."""

    kind: str
    subject: str
    state: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "state": self.state,
            "detail": self.detail,
            **({"data": self.data} if self.data else {}),
        }


@dataclass(frozen=True)
class Report:
    device: str
    flashinfer: str
    pins: str
    chain: str | None
    checks: tuple[Check, ...]

    def count(self, state: str) -> int:
        return sum(1 for c in self.checks if c.state == state)

    @property
    def failed(self) -> bool:
        return self.count(FAILED) > 0

    def summary(self) -> str:
        return (
            f"{self.count(PASSED)} passed, {self.count(FAILED)} failed, "
            f"{self.count(NOT_RUN)} not run"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "device": self.device,
            "flashinfer": self.flashinfer,
            "pins": self.pins,
            "chain": self.chain,
            "summary": {s: self.count(s) for s in (PASSED, FAILED, NOT_RUN)},
            "checks": [c.to_json() for c in self.checks],
        }

    def to_markdown(self) -> str:
        lines = [
            "# fi_patches validate",
            "",
            f"- device: {self.device}",
            f"- FlashInfer: {self.flashinfer}",
            f"- pins: {self.pins}",
            f"- chain: {self.chain or 'none given (--chain CHAIN.toml times one)'}",
            f"- result: {self.summary()}",
            "",
        ]
        if not self.checks:
            lines.append("No checks: the pin table is empty and no chain was given.")
            return "\n".join(lines) + "\n"
        lines += ["| check | subject | state | detail |", "|---|---|---|---|"]
        lines += [
            f"| {c.kind} | {_cell(c.subject)} | {c.state} | {_cell(c.detail)} |"
            for c in self.checks
        ]
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def not_run(checks: Sequence[Check], reason: str) -> tuple[Check, ...]:
    """``checks`` all marked not run, each with ``reason``."""
    return tuple(Check(c.kind, c.subject, NOT_RUN, f"not run: {reason}") for c in checks)
