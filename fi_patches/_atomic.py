"""Writing a command's output files all together or not at all: every path is checked before
anything is written, each file goes to a temp file in its target directory, and only when all
are written are they moved into place with ``os.replace``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path


class OutputError(OSError):
    """An output path that cannot be written; the message names the path and why, in one line."""


def check_output(path: str | os.PathLike[str], suffixes: Sequence[str] = ()) -> Path:
    """``path`` as a :class:`Path` if a file can be written there: its directory exists, it is
    not a directory itself, and its suffix is one of ``suffixes`` (any, when empty); else
    :class:`OutputError`."""
    out = Path(path)
    if suffixes and out.suffix.lower() not in suffixes:
        raise OutputError(f"{out}: must end in {' or '.join(suffixes)}")
    if out.is_dir():
        raise OutputError(f"{out}: is a directory; give a file name")
    parent = out.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise OutputError(f"{out}: cannot be written ({parent} {why})")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{out}: cannot be written ({parent} is not writable)")
    return out


def write_all(files: Iterable[tuple[str | os.PathLike[str], str]]) -> None:
    """Write each ``(path, text)`` as UTF-8, all or none: a failure before the last rename
    leaves no new file behind (a rename that fails after others succeeded cannot be undone,
    but every path was checked first, so that takes the disk failing in between)."""
    pending = [(check_output(path), text) for path, text in files]
    written: list[tuple[str, Path]] = []
    try:
        for out, text in pending:
            fd, temp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
            written.append((temp, out))
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        for temp, out in written:
            os.replace(temp, out)
    except OSError as exc:
        for temp, _ in written:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        reason = exc.strerror or str(exc)
        name = exc.filename or (pending[len(written) - 1][0] if written else "")
        raise OutputError(f"{name}: cannot be written ({reason})") from exc
