"""An A/B of fi_patches at two commits: ``benchmarks/pinning_overhead.py`` (or another script
that prints the same table) run in turn on this checkout and on a worktree of ``--old``, pair
by pair (new, old, new, old, ...), the same script file on both sides (this checkout's, copied
into the worktree), so only fi_patches differs. Prints, per row, the median of the runs'
verdicts (the ``median`` column: each run's median of per-round ratios against stock) with
their range, for each side. A row's verdicts spread by about 0.01-0.02 between runs of one
commit on the 2-core VM, so a change smaller than that needs more pairs than it can be given.

    python benchmarks/ab.py --old REV [--pairs 6] [--script pinning_overhead.py] [-- ARGS]

ARGS go to the script (default: ``--repeat 101 --number 200``); ``FI_PATCHES_DEVICE`` defaults
to ``sm_103`` as the script's does.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^(.*?)\s*(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+\S+\s+\S+\s*$")
"""A row of the script's tables: case, stock us, fi_patches us, best, median, target, ok."""
TABLE = re.compile(r"^FlashInfer \S+, (.+?)(?: \(|,)")
"""A table's title line: what it times (the rows under it are named within it)."""


def verdicts(output: str) -> dict[tuple[str, str], float]:
    """``(table, row) -> verdict`` of one run's output."""
    found: dict[tuple[str, str], float] = {}
    table = ""
    for line in output.splitlines():
        title = TABLE.match(line)
        if title:
            table = title.group(1)
            continue
        row = ROW.match(line)
        if row:
            found[(table, row.group(1).strip())] = float(row.group(5))
    return found


def run(checkout: Path, script: str, args: list[str]) -> dict[tuple[str, str], float]:
    env = dict(os.environ)
    env.setdefault("FI_PATCHES_DEVICE", "sm_103")
    done = subprocess.run(
        [sys.executable, str(Path("benchmarks") / script), *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return verdicts(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", required=True, help="the commit to compare this checkout with")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--script", default="pinning_overhead.py")
    parser.add_argument("args", nargs="*", default=["--repeat", "101", "--number", "200"])
    options = parser.parse_args()

    old = Path(tempfile.mkdtemp(prefix="fi_patches_ab_"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(old), options.old], cwd=ROOT, check=True
    )
    try:
        shutil.copy(ROOT / "benchmarks" / options.script, old / "benchmarks" / options.script)
        sides: dict[str, list[dict[tuple[str, str], float]]] = {"new": [], "old": []}
        for pair in range(options.pairs):
            for side, checkout in (("new", ROOT), ("old", old)):
                sides[side].append(run(checkout, options.script, options.args))
            print(f"pair {pair + 1} of {options.pairs} done", file=sys.stderr)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
    rows = list(dict.fromkeys(key for runs in sides.values() for found in runs for key in found))

    def summary(side: str, key: tuple[str, str]) -> str:
        values = [found[key] for found in sides[side] if key in found]
        if not values:
            return "-"
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    print(f"{options.script} {' '.join(options.args)}: {options.pairs} pairs, new = this checkout")
    shown = None
    for key in rows:
        table, row = key
        if table != shown:
            print(f"\n{table}\n{'row':<50}{'new':>22}{options.old[:12]:>24}")
            shown = table
        print(f"{row:<50}{summary('new', key):>22}{summary('old', key):>24}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
