"""Reading a pin file, or any other file of ours a user hands in (a CHAIN.toml, recorded
timings, a tuner cache), into its parsed form. Whatever the file holds, this returns the parsed
data or raises :class:`PinTableError` naming the file: files above a size limit
(:data:`MAX_FILE_BYTES` for pin files) and anything but a regular file are refused before they
are read, and bytes that are not UTF-8, nesting deeper than the parser's recursion limit,
integers too long to convert and keys given twice are problems, not stray exceptions."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from fi_patches import _toml
from fi_patches._untrusted import error_text
from fi_patches.pins.errors import PinProblem, PinTableError
from fi_patches.pins.fields import OversizeInteger

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
        return _toml.loads(text)
    except _toml.TOMLDecodeError as exc:
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
