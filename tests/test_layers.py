"""The layers of pyproject.toml's import-linter contract, at run time: importing the modules of
a layer and those below it, in a fresh interpreter, loads no module of a layer above. This sees
what ``lint-imports`` cannot: its graph has no edge from a module to its package's
``__init__``, which Python runs first (a package face that imports its modules eagerly would
pull a higher layer into every import of a low module)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fi_patches.pins.reading import toml

ROOT = Path(__file__).resolve().parent.parent


def _layers() -> list[list[str]]:
    """The layers contract's modules, the bottom layer first."""
    config = toml.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    return [[m.strip() for m in re.split(r"[|:]", layer)] for layer in reversed(layers)]


LAYERS = _layers()
ENGINE = next(i for i, layer in enumerate(LAYERS) if "fi_patches.pinning.stack" in layer)


def _within(module: str, names: list[str]) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


@pytest.mark.parametrize("level", range(ENGINE + 1), ids=lambda i: LAYERS[i][0])
def test_a_layer_loads_no_module_above_it(level: int) -> None:
    below = [m for layer in LAYERS[: level + 1] for m in layer]
    above = [m for layer in LAYERS[level + 1 :] for m in layer]
    code = (
        "import importlib, sys\n"
        f"for name in {below!r}:\n"
        "    importlib.import_module(name)\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert run.returncode == 0, run.stderr
    loaded = run.stdout.split()
    assert set(below) <= set(loaded)
    assert [m for m in loaded if _within(m, above)] == [], f"importing {LAYERS[level]}"
