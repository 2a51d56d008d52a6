"""Run a test's script in a fresh interpreter, as a server process would start, and read the
one ``REPORT <json>`` line it prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPORT = "REPORT "


def run_reporting(script: Path, env: dict[str, str], cwd: Path) -> tuple[Any, str]:
    """The script's report and its whole stderr; the test fails when it exits non-zero or
    reports other than once."""
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    reports = [line for line in result.stdout.splitlines() if line.startswith(REPORT)]
    assert len(reports) == 1, result.stdout
    return json.loads(reports[0][len(REPORT) :]), result.stderr
