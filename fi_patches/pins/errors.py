"""Errors of pin tables: every problem names the file, the entry and the field with its value.

Values come from untrusted files, so they are shown through :mod:`fi_patches._text`: as the
file spells them, bounded in length and depth, and never formatting an integer past Python's
int-to-str digit limit."""

from __future__ import annotations

from dataclasses import dataclass

from fi_patches._text import cut, safe_name, value_text

MAX_SHOWN_PROBLEMS = 50
"""A :class:`PinTableError`'s message lists at most this many problems (``problems`` has all)."""

MAX_MESSAGE = 400
"""Characters of one problem's message shown (a message may quote a parser's or FlashInfer's)."""


class _LeftOut:
    """The value of a field the file leaves out (its problem names the field alone)."""

    def __repr__(self) -> str:
        return "LEFT_OUT"


LEFT_OUT = _LeftOut()


@dataclass(frozen=True)
class PinProblem:
    """One thing wrong with a pin table."""

    source: str
    where: str
    field: str | None
    value: object
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.where}: {self.detail()}"

    def detail(self) -> str:
        """The field, its value as the file spells it, and what is wrong with it."""
        message = cut(self.message, MAX_MESSAGE)
        if self.field is None:
            return message
        if self.value is LEFT_OUT:
            return f"{safe_name(self.field)}: {message}"
        return f"{safe_name(self.field)} = {value_text(self.value)}: {message}"


class PinTableError(ValueError):
    """A pin table that cannot be applied; ``problems`` lists everything wrong with it."""

    def __init__(self, problems: list[PinProblem]) -> None:
        self.problems = list(problems)
        lines = [str(p) for p in self.problems[:MAX_SHOWN_PROBLEMS]]
        if len(self.problems) > MAX_SHOWN_PROBLEMS:
            lines.append(f"... and {len(self.problems) - MAX_SHOWN_PROBLEMS} more")
        head = (
            "invalid pin table"
            if len(self.problems) == 1
            else f"invalid pin table ({len(self.problems)} problems)"
        )
        super().__init__(head + ":\n  " + "\n  ".join(lines))

    def one_line(self) -> str:
        """Every problem on one line, for a log record."""
        shown = [str(p) for p in self.problems[:MAX_SHOWN_PROBLEMS]]
        if len(self.problems) > MAX_SHOWN_PROBLEMS:
            shown.append(f"... and {len(self.problems) - MAX_SHOWN_PROBLEMS} more")
        return "; ".join(shown)
