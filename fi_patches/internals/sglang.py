"""Everything fi_patches uses from SGLang, named once, in the boundary's form (see
:mod:`fi_patches.internals.flashinfer`): the releases the plugin is verified on, each internal
with its probe, and the per-rank tuner cache layout ``pins record`` reads.

Read from SGLang 0.5.23's wheel: ``sglang/srt/plugins/__init__.py`` loads the entry points of
the group ``sglang.srt.plugins`` in every process (``load_plugins``), keeping only the names
``SGLANG_PLUGINS`` lists when it is set. ``sglang/srt/model_executor/runner/
flashinfer_autotune.py`` gates tuning (``should_run_flashinfer_autotune``), sets FlashInfer's
tune group inside ``_autotune_process_group`` by importing ``set_autotune_process_group`` from
``flashinfer.autotuner`` when it runs (so fi_patches' guard on that name is what it calls), and
saves one v1 tuner file per rank under ``flashinfer_autotune_cache_path``'s layout.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

from fi_patches.internals import (
    ATTRIBUTE,
    CALLABLE,
    MODULE,
    SGLANG,
    Declared,
    Internal,
)
from fi_patches.internals import SGLANG_PLUGIN as PLUGIN
from fi_patches.internals import SGLANG_PLUGIN_DEVICES as PLUGIN_DEVICES

__all__ = ["PLUGIN", "PLUGIN_DEVICES", "SGLANG"]


# --- the general plugin -------------------------------------------------------------------------

PLUGINS_MODULE = "sglang.srt.plugins"
LOAD_PLUGINS = "load_plugins"
LOAD_BY_GROUP = "load_plugins_by_group"
"""Discovers the group's entry points, filtered by ``SGLANG_PLUGINS``."""
PLUGINS_GROUP_ATTRIBUTE = "GENERAL_PLUGINS_GROUP"
GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"
"""The entry-point group SGLang loads in every process."""
ENTRY_POINT_NAME = "fi_patches"
ENTRY_POINT_VALUE = "fi_patches.sglang.plugin:register"
"""As pyproject.toml declares it."""
ENVIRON_MODULE = "sglang.srt.environ"
PLUGINS_ENV = "SGLANG_PLUGINS"
"""SGLang's whitelist of general plugins (comma-separated names; unset: all of them)."""

LOGGER = "sglang"

# --- its tuning step ----------------------------------------------------------------------------

AUTOTUNE_MODULE = "sglang.srt.model_executor.runner.flashinfer_autotune"
TUNE_GATE = "should_run_flashinfer_autotune"
GROUP_SITE = "_autotune_process_group"
"""The context manager that sets FlashInfer's tune group for SGLang's tuning step."""
SET_GROUP = "set_autotune_process_group"
CACHE_PATH = "flashinfer_autotune_cache_path"

CACHE_SUBDIR = ("flashinfer", "autotune")
"""``$SGLANG_CACHE_DIR/flashinfer/autotune/<FlashInfer version>/sm<XY>/<model key>/``."""
RUNS_DIR = "runs"
"""Per-start files (``SGLANG_FLASHINFER_AUTOTUNE_CACHE=0``), beside the rank files."""
RANK_FILE = re.compile(r"^rank_tp(\d+)_pp(\d+)_dp(\d+)(?:_gpu[\w-]+)?(?:\.[\w.]+)?\.json$")
"""``rank_tp{t}_pp{p}_dp{d}[_gpu<uuid>].json``; a per-start file adds ``.<time>.<uuid>``."""
LAYOUT_CONSTANTS = ("flashinfer", "autotune", "rank_tp", "_pp", "_dp", ".json")
"""The strings ``flashinfer_autotune_cache_path`` builds the rank file's path from."""
TUNER_MODULE = "flashinfer.autotuner"
"""Where ``_autotune_process_group`` imports the setter from, when it runs."""


def arch_dir(arch: str) -> str:
    """SGLang's directory name of an arch: ``sm_103`` -> ``sm103``."""
    return arch.replace("_", "")


def _check_group_name(name: Any) -> str | None:
    if name != GENERAL_PLUGINS_GROUP:
        return f"it is {name!r}, not {GENERAL_PLUGINS_GROUP!r}"
    return None


def _check_whitelist(variable: Any) -> str | None:
    if getattr(variable, "name", None) != PLUGINS_ENV or not callable(variable.get):
        return f"it is not SGLang's variable {PLUGINS_ENV} (found {variable!r})"
    return None


INTERNALS: tuple[Declared, ...] = (
    Internal("sglang_plugins", MODULE, PLUGINS_MODULE, "", (PLUGIN,)),
    Internal("sglang_load_plugins", CALLABLE, PLUGINS_MODULE, LOAD_PLUGINS, (PLUGIN,)),
    Internal(
        "sglang_load_plugins_by_group",
        CALLABLE,
        PLUGINS_MODULE,
        LOAD_BY_GROUP,
        (PLUGIN,),
        params=("group", "excluded_dists"),
    ),
    Internal(
        "sglang_plugins_group",
        ATTRIBUTE,
        PLUGINS_MODULE,
        PLUGINS_GROUP_ATTRIBUTE,
        (PLUGIN,),
        check=_check_group_name,
    ),
    Internal(
        "sglang_plugins_env",
        ATTRIBUTE,
        ENVIRON_MODULE,
        f"Envs.{PLUGINS_ENV}",
        (PLUGIN,),
        check=_check_whitelist,
    ),
)
"""Every SGLang internal fi_patches uses."""


def plugins_group() -> Any:
    """The group name SGLang's ``load_plugins`` reads."""
    return getattr(importlib.import_module(PLUGINS_MODULE), PLUGINS_GROUP_ATTRIBUTE)


# --- the tuning step, read from its source ------------------------------------------------------
# Importing SGLang's tuning module pulls its model stack (``forward_batch_info`` ->
# ``sglang.srt.configs`` -> ``multimodal.internvl_utils`` -> torchvision, built for one torch ABI),
# which the plugin never needs. These checks read the installed module's source instead.


def autotune_source() -> Path | None:
    """The installed SGLang's tuning module file, found without importing it."""
    spec = importlib.util.find_spec("sglang.srt.model_executor")
    if spec is None or not spec.submodule_search_locations:
        return None
    *_, runner, module = AUTOTUNE_MODULE.split(".")
    path = Path(next(iter(spec.submodule_search_locations))) / runner / f"{module}.py"
    return path if path.is_file() else None


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def tuning_site_problem(path: Path) -> str | None:
    """None when SGLang's tuning module at ``path`` still has its gate, still imports
    FlashInfer's ``set_autotune_process_group`` from ``flashinfer.autotuner`` inside
    ``_autotune_process_group`` (looked up when it runs, so fi_patches' guard on that name is
    what it calls) and still builds the rank file layout; else what changed, as a clause."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError) as exc:
        return f"{path} cannot be read ({type(exc).__name__})"
    where = f"{AUTOTUNE_MODULE}"
    if _function(tree, TUNE_GATE) is None:
        return f"{where}.{TUNE_GATE} is gone"
    site = _function(tree, GROUP_SITE)
    if site is None:
        return f"{where}.{GROUP_SITE} is gone, so SGLang sets FlashInfer's tune group elsewhere"
    imports = [
        n
        for n in ast.walk(site)
        if isinstance(n, ast.ImportFrom)
        and n.module == TUNER_MODULE
        and any(a.name == SET_GROUP and a.asname is None for a in n.names)
    ]
    calls = [
        n
        for n in ast.walk(site)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == SET_GROUP
    ]
    if not imports or not calls:
        return (
            f"{where}.{GROUP_SITE} no longer imports {SET_GROUP} from {TUNER_MODULE} when it "
            "runs, so fi_patches' rank guard would not run before it"
        )
    cache_path = _function(tree, CACHE_PATH)
    if cache_path is None:
        return f"{where}.{CACHE_PATH} is gone"
    strings = {n.value for n in ast.walk(cache_path) if isinstance(n, ast.Constant)}
    missing = [c for c in LAYOUT_CONSTANTS if not any(c in str(v) for v in strings)]
    if missing:
        return f"{where}.{CACHE_PATH} no longer builds the rank file layout (no {missing[0]!r})"
    return None
