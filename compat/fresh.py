"""``python -m compat.fresh COMMITTED WRITTEN``: fail when the committed ``compat/RESULTS.md``
is not what the matrix run just wrote, so the committed copy cannot go stale.

Two things are left out of the comparison because they change with every run, not with the
results: the ``Generated ...`` line (timestamp and machine) and the durations of the
``## Wall time`` section. Everything else (states, reasons, probe counts, test counts, the
newest release on the registry, the cells) must be equal.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

GENERATED = "Generated "
"""How :func:`compat.report.render` starts its timestamp and machine line."""
WALL_TIME = "## Wall time"
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:s|min|h)\b")
TIME = "<time>"


def comparable(text: str) -> list[str]:
    """``text``'s lines with the timestamp line dropped and wall-time durations masked."""
    lines = []
    section = ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line
        if line.startswith(GENERATED):
            continue
        lines.append(DURATION.sub(TIME, line) if section == WALL_TIME else line)
    return lines


def differences(committed: str, written: str) -> list[str]:
    """A unified diff of the two texts' comparable lines (empty when they agree)."""
    return list(
        difflib.unified_diff(
            comparable(committed),
            comparable(written),
            "committed compat/RESULTS.md",
            "written by this run",
            lineterm="",
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m compat.fresh COMMITTED WRITTEN", file=sys.stderr)
        return 2
    committed, written = (Path(a) for a in args)
    try:
        diff = differences(committed.read_text(encoding="utf-8"), written.read_text("utf-8"))
    except OSError as exc:
        print(f"compat.fresh: {exc}", file=sys.stderr)
        return 2
    if diff:
        print("\n".join(diff))
        print(
            f"compat.fresh: {written} differs from the committed {committed} (timestamp and "
            "durations aside): commit the file this run wrote",
            file=sys.stderr,
        )
        return 1
    print(f"compat.fresh: the committed {committed} matches this run", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
