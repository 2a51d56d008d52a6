"""A site directory holding only some installed packages (links to them), for a child
interpreter that runs ``-I`` with nothing else on its path: FlashInfer and torch are then not
installed, for real, as on a CPU laptop with only fi_patches' wheel."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path


def isolated_site(root: Path, packages: list[str]) -> Path:
    """A directory holding only ``packages`` (links to the installed ones)."""
    site = root / "site"
    site.mkdir(parents=True)
    for name in packages:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations
        os.symlink(next(iter(spec.submodule_search_locations)), site / name)
    return site


def run_cli(site: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m fi_patches ARGS`` in an isolated interpreter that sees only ``site``."""
    code = (
        "import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p]; "
        f"sys.path.insert(0, {str(site)!r}); "
        f"import fi_patches.cli; raise SystemExit(fi_patches.cli.main({args!r}))"
    )
    return subprocess.run(
        [sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )
