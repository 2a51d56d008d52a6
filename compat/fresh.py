"""``python -m compat.fresh COMMITTED WRITTEN``: fail when the committed ``compat/RESULTS.md``
disagrees with the one the matrix run just wrote on a verdict, so the committed copy never says
what the last run did not.

Only verdicts are compared: the newest release on the registry, each cell's feature states and
reasons, whether each cell's tests passed (no test failed or errored), the failing tests, the
problems and the cells with their expectations. What changes with the suite or the machine, not
with the verdicts, is left out: the ``Generated ...`` line, test and probe counts, the suites'
path counts, the list of other skips and the wall times. Editing a test therefore needs no full
matrix run to refresh the committed file; a changed verdict or a failing cell still does.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

GENERATED = "Generated "
"""How :func:`compat.report.render` starts its timestamp and machine line."""
DROPPED_SECTIONS = ("### Other skips", "## Wall time")
"""Sections that hold counts or timings only; everything under them is left out."""
TESTS = "## Tests"
PROBES = re.compile(r" \(\d+/\d+ probes\)|(?<=all )\d+ (?=probes)")
PATHS = re.compile(r" \(\d+ paths\)")
COUNTS = re.compile(r"^\d+ \w+(?:, \d+ \w+)*$|^no tests$")
"""The Features table's ``tests`` cell, as :func:`compat.outcomes.describe_counts` writes it."""
BAD = re.compile(r"\b\d+ (?:failed|error)\b")


def _outcome(counts: str) -> str:
    """``pass`` or ``fail`` for a ``describe_counts`` text (``fail`` when any test failed or
    errored)."""
    return "fail" if any(int(m.split()[0]) for m in BAD.findall(counts)) else "pass"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tests_row(line: str) -> str:
    """A row of the Tests table as ``cell | suite | pass/fail | failing files``."""
    cells = _cells(line)
    if len(cells) < 4 or not cells[0].startswith("`"):
        return line
    # cell, suite, one column per outcome, disabled-skip, failing files.
    numbers = cells[2:-2]
    bad = any(n.isdigit() and int(n) for n in numbers[1:3])  # failed, error
    return f"| {cells[0]} | {PATHS.sub('', cells[1])} | {'fail' if bad else 'pass'} | {cells[-1]} |"


def _features_row(line: str) -> str:
    cells = _cells(line)
    if len(cells) < 3 or not cells[0].startswith("`"):
        return PROBES.sub("", line)
    last = cells[-1]
    if COUNTS.match(last):
        cells[-1] = _outcome(last)
    return PROBES.sub("", "| " + " | ".join(cells) + " |")


def comparable(text: str) -> list[str]:
    """``text``'s verdict lines, with counts, timings and the timestamp line left out."""
    lines = []
    section = ""
    for line in text.splitlines():
        if line.startswith("## ") or line.startswith("### "):
            section = line
        if line.startswith(GENERATED) or section in DROPPED_SECTIONS:
            continue
        if section == TESTS:
            if line.startswith("|---") or line.startswith("| cell |"):
                continue
            lines.append(_tests_row(line) if line.startswith("| ") else line)
        elif line.startswith("| "):
            lines.append(_features_row(line))
        else:
            lines.append(line)
    return lines


def differences(committed: str, written: str) -> list[str]:
    """A unified diff of the two texts' verdict lines (empty when they agree)."""
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
            f"compat.fresh: {written} differs from the committed {committed} in a verdict "
            "(counts, timings and the timestamp aside): commit the file this run wrote",
            file=sys.stderr,
        )
        return 1
    print(f"compat.fresh: the committed {committed} matches this run's verdicts", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
