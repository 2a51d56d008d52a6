"""``python -m compat.run``: the whole compat matrix, sequentially, for CI (``nox -s matrix``
with this interpreter's nox; extra arguments go to nox, e.g. ``-R`` to reuse environments)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence

from compat.cell import ROOT


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        import nox  # noqa: F401
    except ModuleNotFoundError:
        print("compat.run needs nox: pip install 'nox>=2024.4.15' (the dev extra)", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "matrix", *args]
    start = time.monotonic()
    code = subprocess.call(command, cwd=ROOT)
    print(f"compat matrix: exit {code} after {time.monotonic() - start:.0f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
