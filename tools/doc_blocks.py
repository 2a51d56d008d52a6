"""The docs' generated and checked blocks: ``python -m tools.doc_blocks`` prints whether each
generated block matches the real command, ``--write`` rewrites the ones that do not.

A block sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` markers in its page
(:data:`PAGES`): the doctor block in ``docs/install.md``, the walkthrough (checked by
``tests/test_docs.py``, not generated) in ``docs/pins-cli.md``. The doctor block is
``FI_PATCHES_DEVICE=sm_103 python -m fi_patches doctor`` in this checkout's environment with
no other ``FI_PATCHES_*`` variable set and the self-check cache off, the checkout's path shown
as ``<checkout>``."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

PAGES: dict[str, Path] = {
    "doctor": DOCS / "install.md",
    "walkthrough": DOCS / "pins-cli.md",
}
"""The page each block lives in."""

DOCTOR_COMMAND = "FI_PATCHES_DEVICE=sm_103 python -m fi_patches doctor"


def doctor_block() -> str:
    """The doctor block's text: the command, then what it prints here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.update(FI_PATCHES_DEVICE="sm_103", FI_PATCHES_CACHE_DIR="off")
    result = subprocess.run(
        [sys.executable, "-m", "fi_patches", "doctor"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    printed = result.stdout.replace(str(ROOT), "<checkout>").rstrip("\n")
    return f"```\n$ {DOCTOR_COMMAND}\n{printed}\n```"


BLOCKS: dict[str, Callable[[], str]] = {"doctor": doctor_block}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {name}:begin -->\n)(.*?)(\n<!-- {name}:end -->)", re.DOTALL)


def _shown(page: Path) -> str:
    return str(page.relative_to(ROOT))


def current(name: str, text: str | None = None) -> str:
    """The block ``name`` as its page (or ``text``, that page's content) holds it."""
    page = PAGES[name]
    if text is None:
        text = page.read_text(encoding="utf-8")
    match = _pattern(name).search(text)
    if match is None:
        raise SystemExit(
            f"{_shown(page)} has no <!-- {name}:begin --> ... <!-- {name}:end --> block"
        )
    return match.group(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.doc_blocks", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the blocks that differ")
    args = parser.parse_args(argv)
    stale = []
    for name, make in BLOCKS.items():
        page = PAGES[name]
        text = page.read_text(encoding="utf-8")
        block = make()
        if current(name, text) == block:
            continue
        stale.append(f"{_shown(page)} ({name})")
        if args.write:
            text = _pattern(name).sub(lambda m, b=block: m.group(1) + b + m.group(3), text)
            page.write_text(text, encoding="utf-8")
    if args.write and stale:
        print(f"rewrote {', '.join(stale)}")
        return 0
    print(f"stale: {', '.join(stale)}" if stale else "the generated blocks are up to date")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
