"""Errors of pin tables: every problem names the file, the entry and the field with its value.

Values come from untrusted files, so they are shown through
:func:`fi_patches.pins.values.value_text`: as the file spells them, bounded in length and depth,
and never formatting an integer past Python's int-to-str digit limit."""

from __future__ import annotations

import reprlib
from dataclasses import dataclass

from fi_patches.pins.values import value_text

MAX_SHOWN_PROBLEMS = 50
"""A :class:`PinTableError`'s message lists at most this many problems (``problems`` has all)."""

MAX_MESSAGE = 400
"""Characters of one problem's message shown (a message may quote a parser's or FlashInfer's)."""


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` limits, plus integers too long to print shown by their size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxstring = self.maxother = self.maxlong = 60
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = 6
        self.maxdict = 4

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 192:  # ~58 digits: printing it could hit the digit limit
            return f"<{'-' if x < 0 else ''}integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    def repr_str(self, x: str, level: int) -> str:
        return super().repr_str(x[: self.maxstring * 2], level)


_BOUNDED = _BoundedRepr()


def safe_repr(value: object) -> str:
    """``repr(value)`` cut to a readable size; never raises, whatever ``value`` holds."""
    try:
        return _BOUNDED.repr(value)
    except Exception:  # a hostile __repr__, or anything reprlib does not expect
        return f"<{type(value).__name__}>"


def safe_name(name: object) -> str:
    """A field or section name as written in the file, cut to a readable size."""
    text = name if isinstance(name, str) else safe_repr(name)
    return text if len(text) <= 60 else text[:57] + "..."


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
        message = self.message
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
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
