"""Errors of pin tables: every problem names the file, the entry and the field with its value."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PinProblem:
    """One thing wrong with a pin table."""

    source: str
    where: str
    field: str | None
    value: object
    message: str

    def __str__(self) -> str:
        place = f"{self.source}: {self.where}"
        if self.field is not None:
            place += f": {self.field} = {self.value!r}"
        return f"{place}: {self.message}"


class PinTableError(ValueError):
    """A pin table that cannot be applied; ``problems`` lists everything wrong with it."""

    def __init__(self, problems: list[PinProblem]) -> None:
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        head = (
            "invalid pin table" if len(lines) == 1 else f"invalid pin table ({len(lines)} problems)"
        )
        super().__init__(head + ":\n  " + "\n  ".join(lines))

    def one_line(self) -> str:
        """Every problem on one line, for a log record."""
        return "; ".join(str(p) for p in self.problems)
