"""Writing a command's output files all together or not at all: every path is checked before
anything is written, each file goes to a temp file in its target directory, and only when all
are written are they moved into place with ``os.replace``. A new file gets the mode the umask
gives any new file (``mkstemp``'s own 0600 would lock out a server running as another user); a
file written over keeps its mode."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
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


_umask_lock = threading.Lock()


def _umask() -> int:
    """The process's umask: read from ``/proc/self/status`` where Linux has it (changing nothing,
    so other threads creating files meanwhile are unaffected), else by setting it and setting it
    back, under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def file_mode(path: Path) -> int:
    """The permission bits a file written to ``path`` gets: those of the file there now (a
    lockfile written over stays as readable as it was), else ``0o666`` less the umask, as
    ``open()`` would create it."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


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
                os.fchmod(handle.fileno(), file_mode(out))
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


Named = tuple[str, str | os.PathLike[str] | None]
"""A path and how the command line names it (``--out``, ``--from``); None where not given."""


def _same_file(first: str | os.PathLike[str], second: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: the same inode where both exist (hard links too), else
    the same path once relative parts and symlinks are resolved."""
    try:
        if os.path.samefile(first, second):
            return True
    except OSError:
        pass
    return Path(first).resolve() == Path(second).resolve()


def overwrites_input(outputs: Sequence[Named], inputs: Sequence[Named]) -> str | None:
    """The line refusing a command whose output file is one of its inputs, lies inside an input
    directory, or is another of its outputs, or None: checked before anything is read, so a
    careless ``--out`` never replaces the cache or table the command was reading, nor lands
    among a cache directory's files."""
    given = [(flag, path) for flag, path in outputs if path is not None]
    for index, (flag, out) in enumerate(given):
        others = [("input", name, path) for name, path in inputs if path is not None]
        others += [("output", name, path) for name, path in given[index + 1 :]]
        for role, name, path in others:
            if _same_file(out, path):
                return (
                    f"{flag} {out} is the same file as the {role} {name} {path}; nothing was "
                    "read or written: choose another output file"
                )
        for name, source in inputs:
            if source is not None and _inside(out, source):
                return (
                    f"{flag} {out} is inside the input directory {name} {source}, among the "
                    "files read from it; nothing was read or written: choose an output file "
                    "outside it"
                )
    return None


def _inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies under the existing directory ``folder`` (symlinks resolved)."""
    if not os.path.isdir(folder):
        return False
    return Path(folder).resolve() in Path(path).resolve().parents
