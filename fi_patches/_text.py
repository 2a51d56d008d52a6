"""The text of messages, in one place so every command and log line says it the same way.

Counted nouns and section lists: "1 entry", "15 entries", "[[pin]] and [[wide]]".

Untrusted values: values from pin files, caches and other ranks are shown bounded in length and
depth, with control characters escaped, never formatting an integer past Python's int-to-str
digit limit, and never raising.
:func:`value_text` spells a value as a pin file does (``true``, ``null``, ``"text"``),
:func:`safe_repr` and :func:`safe_name` show any object or name as Python does, cut to a readable
size, :func:`error_text` shows an exception, and :func:`cut` bounds any text."""

from __future__ import annotations

import datetime
import json
import math
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_DEPTH = 3
MAX_ITEMS = 6
MAX_STRING = 60
_MAX_INT_BITS = 192  # ~58 digits: printing it could hit the digit limit


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit - 3`` characters and ``...`` where it is longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_text(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line`` of an exception's message, cut to ``limit`` characters, for
    one-sentence reasons and one-line problems; never raises."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # a hostile __str__
        lines = []
    text = cut(lines[0], limit) if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _big_int(value: int) -> str | None:
    if value.bit_length() > _MAX_INT_BITS:
        return f"<{'-' if value < 0 else ''}integer of {value.bit_length()} bits>"
    return None


def value_text(value: object) -> str:
    """``value`` as a pin file writes it (JSON's spelling, which TOML shares for these values):
    ``true``, ``false``, ``null``, ``"text"``, ``[128, 8, 1, 1]``, never Python's ``True``,
    ``None`` or ``'text'``."""
    try:
        return _text(value, 0)
    except Exception:  # anything a parser's output should not hold
        return f"<{type(value).__name__}>"


def _text(value: object, depth: int) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _big_int(value) or str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(cut(value, MAX_STRING), ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            return "[...]"
        items = [_text(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append("...")
        return f"[{', '.join(items)}]"
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            return "{...}"
        pairs = [
            f"{_text(str(k), depth + 1)}: {_text(v, depth + 1)}"
            for k, v in list(value.items())[:MAX_ITEMS]
        ]
        if len(value) > MAX_ITEMS:
            pairs.append("...")
        return f"{{{', '.join(pairs)}}}"
    if isinstance(value, (datetime.date, datetime.time)):  # TOML's dates and times
        return value.isoformat()
    text = repr(value)  # the readers' stand-ins, such as an integer too long to convert
    return text if len(text) <= MAX_STRING else f"<{type(value).__name__}>"


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` limits, plus integers too long to print shown by their size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = MAX_DEPTH
        self.maxstring = self.maxother = self.maxlong = MAX_STRING
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = MAX_ITEMS
        self.maxdict = 4

    def repr_int(self, x: int, level: int) -> str:
        return _big_int(x) or super().repr_int(x, level)

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
    return cut(name if isinstance(name, str) else safe_repr(name), MAX_STRING)


# counted nouns and section lists ----------


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless ``count`` is 1: ``1 entry``, ``15 entries``
    (``plural`` where adding an s does not make it)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def entries(count: int) -> str:
    """``1 entry``, ``15 entries``."""
    return counted(count, "entry", "entries")


def joined(items: Sequence[str], word: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c`` (``or`` for ``word="or"``)."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {word} {items[-1]}"


def sections(names: Iterable[str], word: str = "and") -> str:
    """Pin-table section names as a table spells them: ``[[pin]] and [[cute_dsl]]``."""
    return joined([f"[[{name}]]" for name in names], word)


def section_counts(mapping: Mapping[str, Any]) -> str:
    """The entries of a pin table's mapping (or its sections) per section that has any:
    ``15 [[pin]] entries, 1 [[wide]] entry``, or ``no entries``."""
    counts = [
        counted(len(v), f"[[{k}]] entry", f"[[{k}]] entries")
        for k, v in mapping.items()
        if k != "meta" and v
    ]
    return ", ".join(counts) or "no entries"


def plain(text: str) -> str:
    """A docstring as a terminal shows it: reStructuredText's double backticks dropped."""
    return text.replace("``", "")
