"""SGLang's own functions from its tuning module, taken from the installed source and compiled
alone: the module itself does not import on CPU (it pulls SGLang's model stack and torchvision),
but the functions fi_patches relies on need only ``contextlib``, ``typing`` and torch."""

from __future__ import annotations
import __future__

import ast
import contextlib
import typing
from typing import Any

from fi_patches.internals import sglang as upstream


def function(name: str) -> Any:
    """The installed SGLang's ``flashinfer_autotune.<name>``, with its decorators, compiled from
    its own source as that module compiles it."""
    import torch

    path = upstream.autotune_source()
    assert path is not None, "SGLang's tuning module is not installed"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"{path} defines no {name}"
    module = ast.Module(body=found, type_ignores=[])
    code = compile(module, str(path), "exec", flags=__future__.annotations.compiler_flag)
    namespace: dict[str, Any] = {
        "contextlib": contextlib,
        "Optional": typing.Optional,
        "torch": torch,
    }
    exec(code, namespace)
    return namespace[name]
