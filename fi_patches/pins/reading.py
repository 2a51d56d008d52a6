"""Reading untrusted input of ours: a file a user hands in (a pin file, a CHAIN.toml, recorded
timings, a tuner cache) into its parsed form, then a table or entry field by field, collecting a
:class:`PinProblem` per bad field so a table reports everything wrong with it at once.

Whatever a file holds, :func:`read_pin_file` and its kin return the parsed data or raise
:class:`PinTableError` naming the file: files above a size limit (:data:`MAX_FILE_BYTES` for pin
files) and anything but a regular file are refused before they are read, and bytes that are not
UTF-8, nesting deeper than the parser's recursion limit, integers too long to convert and keys
given twice are problems, not stray exceptions.

An explicit null (JSON ``null``) is a wrong value, never "absent": only a field left out takes
its default. An unknown field is reported once, with the closest known name when there is one;
when that name is a required field left out, its "is required" problem is folded into the
unknown field's ("``max_row = 8``: is not a known field; did you mean max_rows?").

Every problem names the file, the entry and the field with its value (:class:`PinProblem`), and
:class:`PinTableError` lists them all. Values come from untrusted files, so they are shown
through :mod:`fi_patches._text`: as the file spells them, bounded in length and depth, and never
formatting an integer past Python's int-to-str digit limit."""

from __future__ import annotations

import difflib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fi_patches._text import cut, error_text, safe_name, safe_repr, value_text

if sys.version_info >= (3, 11):
    import tomllib as toml
else:
    import tomli as toml
"""The TOML reader: the standard library's ``tomllib`` on Python 3.11+, its backport ``tomli``
(a dependency on 3.10 only) before that. Every module that parses TOML takes it from here."""

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


T = TypeVar("T")


class _Required:
    """The default of a field that must be given (never a value: readers return None)."""

    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()

_SUGGESTED_UNKNOWNS = 16
"""Unknown fields of one entry that get a did-you-mean (each costs a fuzzy match)."""
_SUGGESTIBLE_LENGTH = 64


class OversizeInteger:
    """An integer literal too long to convert (the JSON loader's stand-in), so the schema can
    name its entry and field: it is outside every bound."""

    __slots__ = ("digits", "negative")

    def __init__(self, digits: int, negative: bool) -> None:
        self.digits = digits
        self.negative = negative

    def __repr__(self) -> str:
        return f"<{'-' if self.negative else ''}integer of {self.digits} digits>"


def kind(value: object) -> str:
    """What ``value`` is, for "must be X, not <kind>" (``null`` for None)."""
    if value is None:
        return "null"
    if isinstance(value, OversizeInteger):
        return "int"
    return type(value).__name__


def bounds_text(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    return f"at least {lo}" if lo is not None else f"at most {hi}"


class FieldReader:
    """Reads fields of ``mapping`` (the entry at ``where`` in ``source``) into Python values.

    Each reader returns the value, the default of a field left out, or None after recording
    a problem."""

    def __init__(
        self, source: str, where: str, mapping: object, problems: list[PinProblem]
    ) -> None:
        self.source = source
        self.where = where
        self.problems = problems
        self.field: str | None = None
        """The field being read (for the loader's report of an unexpected error)."""
        self._missing: dict[str, PinProblem] = {}
        self.readable = isinstance(mapping, Mapping)
        if isinstance(mapping, Mapping):
            self.mapping: Mapping[Any, Any] = mapping
            for name in getattr(mapping, "keyed_twice", ()):
                self.problem(name, mapping[name], "is given twice; give each field once")
        else:
            self.mapping = {}
            self.problems.append(
                PinProblem(source, where, None, None, f"must be a table, not {kind(mapping)}")
            )

    def problem(self, field: str | None, value: object, message: str) -> None:
        self.problems.append(PinProblem(self.source, self.where, field, value, message))

    def _get(self, name: str, default: Any) -> tuple[bool, Any]:
        """``(True, value)`` for a value given in the file; ``(False, result)`` for a field
        left out: its default, or None with an "is required" problem."""
        self.field = name
        if name in self.mapping:
            return True, self.mapping[name]
        if default is REQUIRED:
            if self.readable:
                missing = PinProblem(self.source, self.where, name, LEFT_OUT, "is required")
                self._missing[name] = missing
                self.problems.append(missing)
            return False, None
        return False, default

    def integer(
        self, name: str, lo: int | None = None, hi: int | None = None, default: Any = REQUIRED
    ) -> int | None:
        given, value = self._get(name, default)
        if not given:
            return value  # type: ignore[no-any-return]
        if isinstance(value, OversizeInteger):
            bound = lo if value.negative else hi
            expected = f"must be {bounds_text(lo, hi)}" if bound is not None else "is too long"
            self.problem(name, value, expected)
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(name, value, f"must be an integer, not {kind(value)}")
            return None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.problem(name, value, f"must be {bounds_text(lo, hi)}")
            return None
        return value

    def string(
        self, name: str, default: Any = REQUIRED, max_length: int | None = None
    ) -> str | None:
        given, value = self._get(name, default)
        if not given:
            return value  # type: ignore[no-any-return]
        if not isinstance(value, str):
            self.problem(name, value, f"must be a string, not {kind(value)}")
            return None
        if max_length is not None and len(value) > max_length:
            self.problem(name, value, f"must be at most {max_length} characters long")
            return None
        return value

    def int_tuple(self, name: str, parts: Sequence[tuple[str, int, int]]) -> tuple[int, ...] | None:
        """A list of integers, one per ``(part name, lo, hi)`` of ``parts``."""
        given, value = self._get(name, REQUIRED)
        if not given:
            return None
        length = len(parts)
        if not isinstance(value, (list, tuple)):
            self.problem(name, value, f"must be a list of {length} integers, not {kind(value)}")
            return None
        if len(value) != length or any(
            isinstance(v, bool) or not isinstance(v, (int, OversizeInteger)) for v in value
        ):
            self.problem(name, value, f"must be a list of {length} integers")
            return None
        for item, (part, lo, hi) in zip(value, parts, strict=True):
            if isinstance(item, OversizeInteger) or not lo <= item <= hi:
                self.problem(name, value, f"{part} must be {bounds_text(lo, hi)}")
                return None
        return tuple(value)

    def parsed(self, name: str, parse: Callable[[object], T | None], expected: str) -> T | None:
        """A required value read by ``parse`` (None when malformed); ``expected`` says what
        it must be."""
        given, value = self._get(name, REQUIRED)
        if not given:
            return None
        result = parse(value) if value is not None else None
        if result is None:
            self.problem(name, value, f"must be {expected}")
        return result

    def reject_unknown(self, known: Iterable[str]) -> None:
        """A problem for each field not in ``known``, with a did-you-mean where one is close."""
        allowed = sorted(set(known))
        suggested = 0
        for name in self.mapping:
            if name in allowed:
                continue
            close: list[str] = []
            if (
                isinstance(name, str)
                and len(name) <= _SUGGESTIBLE_LENGTH
                and suggested < _SUGGESTED_UNKNOWNS
            ):
                suggested += 1
                close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
            if close:
                message = f"is not a known field; did you mean {close[0]}?"
                self._fold_missing(close[0])
            else:
                message = f"is not a known field (known: {', '.join(allowed)})"
            field = name if isinstance(name, str) else safe_repr(name)
            self.problem(field, self.mapping[name], message)
        self.field = None

    def _fold_missing(self, name: str) -> None:
        """Drop the "is required" problem of ``name``: a misspelt field already names it."""
        missing = self._missing.pop(name, None)
        if missing is not None:
            for position, problem in enumerate(self.problems):
                if problem is missing:
                    del self.problems[position]
                    break


PIN_SUFFIXES = (".toml", ".json")
"""The suffixes a pin file may have: its format follows from it."""

MAX_FILE_BYTES = 16 << 20
"""The largest pin file read (16 MiB: a lockfile of every op a server tunes holds a few thousand
``[[pin]]`` entries of about 500 bytes each; a table of the MXFP8 sections is a few KiB)."""

_MAX_INT_DIGITS = 40
"""Longer JSON integer literals are outside every bound: kept as :class:`OversizeInteger`."""


class KeyedTwice(dict[str, Any]):
    """A JSON object that gave some keys more than once (the last value is kept, as JSON
    readers do); ``keyed_twice`` names them so the schema can report each one."""

    keyed_twice: tuple[str, ...] = ()


def _refuse(source: str, where: str, message: str) -> PinTableError:
    return PinTableError([PinProblem(source, where, None, None, message)])


def read_pin_file(path: Path, source: str) -> object:
    """The parsed content of the ``.toml`` or ``.json`` pin file at ``path``."""
    return read_data_file(path, source)


def read_data_file(
    path: Path,
    source: str,
    *,
    what: str = "pin file",
    max_bytes: int = MAX_FILE_BYTES,
    suffixes: tuple[str, ...] = PIN_SUFFIXES,
) -> object:
    """The parsed content of the ``what`` at ``path``: TOML when its suffix is ``.toml``, else
    JSON; refused unless its suffix is one of ``suffixes`` (any, when empty) and it holds at
    most ``max_bytes``."""
    suffix = path.suffix.lower()
    if suffixes and suffix not in suffixes:
        raise _refuse(source, "file", f"must end in {' or '.join(suffixes)}")
    text = _decode(_read_bytes(path, source, what, max_bytes), source)
    return _parse_toml(text, source) if suffix == ".toml" else _parse_json(text, source)


def _read_bytes(path: Path, source: str, what: str, max_bytes: int) -> bytes:
    too_big = f"is larger than {max_bytes} bytes, the most a {what} may hold"
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise _refuse(source, "file", "is not a regular file")
            if info.st_size > max_bytes:
                raise _refuse(source, "file", too_big)
            data = handle.read(max_bytes + 1)
    except PinTableError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else error_text(exc, 200)
        raise _refuse(source, "file", f"cannot be read ({reason})") from exc
    if len(data) > max_bytes:  # it grew after fstat
        raise _refuse(source, "file", too_big)
    return data


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _refuse(
            source,
            "file",
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}, offset {exc.start})",
        ) from exc


def _parse_toml(text: str, source: str) -> object:
    try:
        return toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise _refuse(
            source, "TOML", error_text(exc, 200).removeprefix("TOMLDecodeError: ")
        ) from exc
    except RecursionError as exc:
        raise _refuse(source, "TOML", "nests too deeply to read") from exc
    except ValueError as exc:  # an integer past Python's int-to-str digit limit
        raise _refuse(
            source,
            "TOML",
            f"holds a value too long to read ({error_text(exc, 200)})",
        ) from exc


def _json_int(text: str) -> int | OversizeInteger:
    digits = len(text.lstrip("-"))
    if digits > _MAX_INT_DIGITS:
        return OversizeInteger(digits, text.startswith("-"))
    return int(text)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) == len(pairs):
        return mapping
    seen: set[str] = set()
    twice: dict[str, None] = {}
    for key, _ in pairs:
        if key in seen:
            twice[key] = None
        seen.add(key)
    keyed = KeyedTwice(mapping)
    keyed.keyed_twice = tuple(twice)
    return keyed


def _parse_json(text: str, source: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_json_object, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise _refuse(source, "JSON", f"{exc.msg} (line {exc.lineno} column {exc.colno})") from exc
    except RecursionError as exc:
        raise _refuse(source, "JSON", "nests too deeply to read") from exc
    except ValueError as exc:
        raise _refuse(
            source,
            "JSON",
            f"holds a value too long to read ({error_text(exc, 200)})",
        ) from exc
