"""``compat.fresh``: the committed compat/RESULTS.md must agree with the one the matrix run wrote
on every verdict; counts, timings and the timestamp may differ (pure Python: texts rendered by
compat/report.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compat import fresh

pytestmark = pytest.mark.release_independent

COMMITTED = Path(__file__).resolve().parent.parent / "compat" / "RESULTS.md"


def rewritten(text: str, old: str, new: str, count: int = 1) -> str:
    assert old in text, old
    return text.replace(old, new, count)


def committed() -> str:
    return COMMITTED.read_text(encoding="utf-8")


def test_another_timestamp_and_other_wall_times_are_the_same_results():
    text = committed()
    generated = next(line for line in text.splitlines() if line.startswith("Generated "))
    later = rewritten(text, generated, "Generated 2031-01-01 00:00 UTC on another machine.")
    wall = later.index("## Wall time")
    slower = re.sub(
        r"(\d+(?:\.\d+)?) (s|min)\b", lambda m: f"{float(m[1]) * 1.7:.1f} {m[2]}", later[wall:]
    )
    timed = later[:wall] + slower
    assert timed != later != text
    assert fresh.differences(text, timed) == []


def test_other_test_probe_and_path_counts_and_other_skips_are_the_same_verdicts():
    text = committed()
    # Every count of passed and skipped tests, probes and suite paths grows by 7.
    bumped = re.sub(r"\b(\d+) (passed|skipped)\b", lambda m: f"{int(m[1]) + 7} {m[2]}", text)
    bumped = re.sub(r"\((\d+)/(\d+) probes\)", lambda m: f"({m[1]}7/{m[2]}7 probes)", bumped)
    bumped = re.sub(r"all (\d+) probes", lambda m: f"all {m[1]}7 probes", bumped)
    bumped = re.sub(r"\((\d+) paths\)", lambda m: f"({m[1]}7 paths)", bumped)
    tests = bumped.index("## Tests")
    problems = bumped.index("### Other skips")
    table = re.sub(
        r"^(\| `[^|]*` \| [^|]*\| )(\d+)( \|)",
        lambda m: f"{m[1]}{int(m[2]) + 7}{m[3]}",
        bumped[tests:problems],
        flags=re.M,
    )
    bumped = bumped[:tests] + table + bumped[problems:]
    skips = bumped.index("### Other skips")
    bumped = bumped[:skips] + bumped[skips:].replace("- ", "- reworded: ", 3)
    assert bumped != text
    assert fresh.differences(text, bumped) == []


def _enabled_to_disabled(text: str) -> tuple[str, str]:
    old = re.search(r"\| ✓ \*\*enabled\*\*(?: \(\d+/\d+ probes\))? \|", text)
    assert old, "no enabled feature in the committed RESULTS.md"
    return old[0], old[0].replace("✓ **enabled**", "✗ **disabled**")


def _reason_reworded(text: str) -> tuple[str, str]:
    old = re.search(r"\*\*disabled\*\*(?: \(\d+/\d+ probes\))?: [^|]*?\. \|", text)
    assert old, "no disabled feature with a reason in the committed RESULTS.md"
    return old[0], old[0][: -len(". |")] + " today. |"


def _tests_fail(text: str) -> tuple[str, str]:
    old = re.search(r"\| (\d+) passed, (\d+) skipped \|", text)
    assert old, "no cell whose tests passed and skipped in the committed RESULTS.md"
    return old[0], f"| {int(old[1]) - 1} passed, 1 failed, {old[2]} skipped |"


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        # A feature's state.
        (_enabled_to_disabled, "disabled"),
        # A reason.
        (_reason_reworded, "today."),
        # A cell's tests now fail (its Features row and its Tests row both say so).
        (_tests_fail, "fail"),
        # A cell of another matrix.
        (lambda text: ("## Cells", "## Cells of another matrix"), "another matrix"),
        # The problems.
        (lambda text: ("## Problems\n\nNone.", "## Problems\n\n- `0.7.1`: not run"), "not run"),
    ],
    ids=["state", "reason", "tests", "cells", "problems"],
)
def test_a_changed_verdict_is_a_difference_naming_the_line(change, shown):
    """Each change is found in the committed file itself (never a count copied from it), so
    the test holds for whatever RESULTS.md the last matrix run wrote."""
    text = committed()
    old, new = change(text)
    changed = rewritten(text, old, new)
    diff = fresh.differences(text, changed)
    assert any(line.startswith("+") and shown in line for line in diff), diff
    assert any(line.startswith("-") for line in diff), diff


def test_a_failure_in_the_tests_table_alone_is_a_difference():
    text = committed()
    row = next(line for line in text.splitlines() if line.startswith("| `0.7.1` | release"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    cells[3] = "2"  # the failed column
    failing = "| " + " | ".join(cells) + " |"
    diff = fresh.differences(text, rewritten(text, row, failing))
    assert "+| `0.7.1` | release | fail | — |" in diff, diff


def test_the_command_exits_1_on_a_difference_and_0_on_a_match(tmp_path, capsys):
    path = tmp_path / "committed.md"
    path.write_text(committed())
    written = tmp_path / "RESULTS.md"
    written.write_text(committed().replace("✓ **enabled**", "✗ **disabled**", 1))
    assert fresh.main([str(path), str(written)]) == 1
    captured = capsys.readouterr()
    assert "+" in captured.out and "commit the file this run wrote" in captured.err
    assert fresh.main([str(path), str(path)]) == 0
    assert fresh.main([str(path), str(tmp_path / "missing.md")]) == 2
