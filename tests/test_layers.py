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


@pytest.mark.release_independent
def test_no_import_circle_in_the_package() -> None:
    """No import circle runs through fi_patches, function-local imports included (grimp, which
    ``lint-imports`` builds its graph with, reads every import statement): a function-local
    import may defer torch, FlashInfer or cutlass, never hide a circle. The layers contract
    alone cannot see one inside a layer, among siblings it lets import each other."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev extra)")
    graph = grimp.build_graph("fi_patches", cache_dir=None)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    circles = [c for c in _strongly_connected(imports) if len(c) > 1]
    assert circles == [], "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in circles)


def _strongly_connected(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of ``edges`` (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found
