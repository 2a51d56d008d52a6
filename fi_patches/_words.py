"""Counted nouns and section lists as messages print them, in one place so every command and
log line says "1 entry", "15 entries" and "[[pin]]" the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


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
