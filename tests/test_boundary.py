"""The FlashInfer boundary holds: outside ``fi_patches/internals/`` no module imports FlashInfer
(or vLLM), spells one of their module paths, or reaches a private member fi_patches does not
define itself; no module but the CuTe DSL code itself (:data:`DSL_CODE`) imports the DSL (or the
CUDA driver bindings it runs on); and every internal the boundary declares is guarded by a
probe."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fi_patches.internals import Internal, OneOf, declared
from tests.drift.cases import mutations

PACKAGE = Path(__file__).resolve().parent.parent / "fi_patches"
BOUNDARY = PACKAGE / "internals"
FOREIGN = ("flashinfer", "vllm", "sglang")
MODULE_PATH = re.compile(r"^(flashinfer|vllm|sglang)\.\w+(\.\w+)*(:\w+)?$")
IMPORTERS = ("import_module", "__import__", "find_spec", "when_imported")
DSL = ("cutlass", "cuda")
DSL_CODE = frozenset({PACKAGE / "wide" / "kernel.py"})
"""Modules that are CuTe DSL code themselves (the wide kernel, a subclass of FlashInfer's DSL
kernel), so import the DSL; any other module gets DSL APIs from ``internals/cute_dsl.py``."""


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if BOUNDARY not in p.parents)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _own_names() -> set[str]:
    """Every name fi_patches defines (functions, classes, attributes, variables)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _violations(path: Path, own: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    docstrings = _docstring_nodes(tree)
    where = path.relative_to(PACKAGE.parent) if PACKAGE.parent in path.parents else path.name
    found = []
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        found += _imports(node, line, FOREIGN)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and MODULE_PATH.match(node.value)
        ):
            found.append(f"{line}: names the module {node.value!r}")
        if isinstance(node, ast.Attribute):
            name = node.attr
            if name.startswith("_") and not name.startswith("__") and name not in own:
                found.append(f"{line}: reaches the foreign private .{name}")
    return found


def _imports(node: ast.AST, line: str, roots: tuple[str, ...]) -> list[str]:
    """What ``node`` imports of the packages ``roots``: an import statement, or an importer
    called with a literal module name."""
    if isinstance(node, ast.Import):
        return [f"{line}: import {a.name}" for a in node.names if a.name.split(".")[0] in roots]
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in roots:
        return [f"{line}: from {node.module} import ..."]
    if isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        literal = [a.value for a in node.args if isinstance(a, ast.Constant)]
        if called in IMPORTERS and any(str(v).split(".")[0] in roots for v in literal):
            return [f"{line}: {called}({literal[0]!r})"]
    return []


def _dsl_imports(path: Path) -> list[str]:
    where = path.relative_to(PACKAGE.parent) if PACKAGE.parent in path.parents else path.name
    return [
        found
        for node in ast.walk(ast.parse(path.read_text()))
        for found in _imports(node, f"{where}:{getattr(node, 'lineno', '?')}", DSL)
    ]


def test_only_the_dsl_code_imports_the_cute_dsl_outside_the_boundary():
    problems = [v for path in _modules() if path not in DSL_CODE for v in _dsl_imports(path)]
    assert problems == [], "use fi_patches.internals.cute_dsl's accessors:\n" + "\n".join(problems)
    assert all(path.is_file() for path in DSL_CODE)  # the allowed modules are there


def test_the_dsl_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import cutlass\nimport cutlass.cute as cute\n"
        "from cutlass.cute.runtime import make_ptr\n"
        "import cuda.bindings.driver as driver\n"
        "import importlib\nimportlib.import_module('cutlass.utils')\n"
        "import torch\n"
    )
    assert len(_dsl_imports(bad)) == 5


def test_no_module_outside_the_boundary_touches_flashinfer():
    own = _own_names()
    problems = [v for path in _modules() for v in _violations(path, own)]
    assert problems == [], "\n".join(problems)


def test_the_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import flashinfer.gemm\n"
        "import importlib\nimportlib.import_module('flashinfer')\n"
        "from vllm.plugins import load_general_plugins\n"
        "MODULE = 'flashinfer.gemm.gemm_base'\n"
        "def f(tuner):\n    return tuner._winner_cache()\n"
    )
    found = _violations(bad, _own_names())
    assert len(found) == 5, found
    assert "reaches the foreign private ._winner_cache" in found[-1]


@pytest.mark.parametrize("internal", declared(), ids=lambda i: i.key)
def test_every_internal_is_guarded_and_needed(internal):
    assert isinstance(internal, (Internal, OneOf))
    assert mutations(internal), f"{internal.key} has no drift mutation"
    for option in internal.options if isinstance(internal, OneOf) else (internal,):
        assert option.module.split(".")[0] in (*FOREIGN, *DSL, "torch")
    keys = [i.key for i in declared()]
    assert keys.count(internal.key) == 1, f"{internal.key} is declared twice"


def test_a_feature_reads_only_the_modules_that_declare_for_it():
    """``needed_by`` reads only the boundary modules ``DECLARING`` lists for a feature (so judging
    the pinning features never imports vLLM's or SGLang's declarations): none of them declares
    an internal for a feature it is not listed for, and each feature finds what a full read finds."""
    import importlib

    from fi_patches.compat.features import FEATURES
    from fi_patches.internals import DECLARING, needed_by

    for name, only in DECLARING:
        if only is not None:
            module = importlib.import_module(f"fi_patches.internals.{name}")
            stray = {f for i in module.INTERNALS for f in i.features} - set(only)
            assert not stray, f"internals/{name}.py declares for {sorted(stray)} too"
    every = declared()
    for feature in FEATURES:
        assert needed_by(feature.name) == tuple(i for i in every if feature.name in i.features)
