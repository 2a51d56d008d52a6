"""``compat.fresh``: the committed compat/RESULTS.md must equal the one the matrix run wrote,
timestamps and durations aside (pure Python: texts rendered by compat/report.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compat import fresh

pytestmark = pytest.mark.release_independent

COMMITTED = Path(__file__).resolve().parent.parent / "compat" / "RESULTS.md"


def rewritten(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def test_another_timestamp_machine_line_and_wall_times_are_the_same_results():
    text = COMMITTED.read_text(encoding="utf-8")
    generated = next(line for line in text.splitlines() if line.startswith("Generated "))
    later = rewritten(text, generated, "Generated 2031-01-01 00:00 UTC on another machine.")
    wall = later.index("## Wall time")
    slower = re.sub(
        r"(\d+(?:\.\d+)?) (s|min)\b", lambda m: f"{float(m[1]) * 1.7:.1f} {m[2]}", later[wall:]
    )
    timed = later[:wall] + slower
    assert timed != later != text
    assert fresh.differences(text, timed) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("passed", "failed"),  # a test count
        ("probes)", "probes, changed)"),  # a probe count or a reason
        ("## Cells", "## Cells of another matrix"),
    ],
)
def test_any_other_change_is_a_difference_naming_the_line(old, new):
    text = COMMITTED.read_text(encoding="utf-8")
    changed = rewritten(text, old, new)
    diff = fresh.differences(text, changed)
    assert any(line.startswith("+") and new in line for line in diff), diff
    assert any(line.startswith("-") and old in line for line in diff), diff


def test_a_duration_outside_the_wall_time_section_counts():
    text = "# Compat matrix results\n\n| `0.7.4` | took 3 s |\n\n## Wall time\n\n| x | 4 s |\n"
    assert fresh.differences(text, text.replace("3 s", "5 s")) != []
    assert fresh.differences(text, text.replace("4 s", "9 s")) == []


def test_the_command_exits_1_on_a_difference_and_0_on_a_match(tmp_path, capsys):
    committed = tmp_path / "committed.md"
    committed.write_text(COMMITTED.read_text(encoding="utf-8"))
    written = tmp_path / "RESULTS.md"
    written.write_text(COMMITTED.read_text(encoding="utf-8").replace("passed", "failed", 1))
    assert fresh.main([str(committed), str(written)]) == 1
    captured = capsys.readouterr()
    assert "+" in captured.out and "commit the file this run wrote" in captured.err
    assert fresh.main([str(committed), str(committed)]) == 0
    assert fresh.main([str(committed), str(tmp_path / "missing.md")]) == 2
