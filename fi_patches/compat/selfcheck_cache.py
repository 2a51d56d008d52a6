"""Outcomes of the expensive self-checks (a kernel compile: a feature's ``compiled_check``) kept
on disk, so a process (and every rank of a server) reuses the verdict of an earlier one instead
of compiling a kernel at every start. The cheap self-checks are never kept: they run in every
process, so a FlashInfer another library patched in memory is judged as it is.

An outcome is keyed by everything that can change it: the fi_patches version and source files,
Python, FlashInfer (version, location), nvidia-cutlass-dsl, torch and vLLM versions, the size
and mtime of the source file of every module the feature's internals live in (an edited or
patched install keeps its version number), the target device (arch, where it came from,
whether CUDA is available), the feature, its check and its probes' results. A changed key is a
miss. Files are written atomically (a temp file, then
``os.replace``); an unreadable or corrupt one is a miss and is rewritten. Only outcomes the
self-check returned are kept; one that raised is not, so a transient error is not made sticky.

Location: ``$FI_PATCHES_CACHE_DIR`` if set (``off`` turns the cache off), else
``$XDG_CACHE_HOME/fi_patches``, else ``~/.cache/fi_patches``; files live under ``selfcheck/``.
``python -m fi_patches doctor --fresh`` (:func:`bypass`) runs every self-check again and
rewrites its file.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fi_patches import _env
from fi_patches._logging import get_logger, log_once
from fi_patches.compat.target import device_properties
from fi_patches.internals.flashinfer import FLASHINFER
from fi_patches.internals.sglang import SGLANG
from fi_patches.internals.vllm import VLLM

logger = get_logger(__name__)

ENV = _env.CACHE_DIR.name
OFF = "off"
FORMAT = 2
DISTRIBUTIONS = (
    FLASHINFER.distribution,
    "nvidia-cutlass-dsl",
    "torch",
    VLLM.distribution,
    SGLANG.distribution,
)
"""Distributions whose versions key an outcome (FlashInfer's location and mtime are added)."""

_bypass = False


def cache_dir() -> Path | None:
    """Where self-check outcomes are kept, or None when the cache is off."""
    override = (_env.get(_env.CACHE_DIR) or "").strip()
    if override:
        return None if override.lower() == OFF else Path(override).expanduser() / "selfcheck"
    xdg = _env.environ().get("XDG_CACHE_HOME", "").strip()
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "fi_patches" / "selfcheck"
    try:
        return Path.home() / ".cache" / "fi_patches" / "selfcheck"
    except RuntimeError:  # no home directory to expand
        return None


def bypass(on: bool = True) -> None:
    """While on, every lookup misses (outcomes are still written): ``doctor --fresh``."""
    global _bypass
    _bypass = on


@functools.lru_cache(maxsize=1)
def _fi_patches_fingerprint() -> str:
    """The fi_patches version and a digest of its source files' sizes and mtimes (an editable
    install changes code without changing the version)."""
    from fi_patches._version import VERSION

    root = Path(__file__).parent.parent  # the fi_patches package
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return f"{VERSION}+{digest.hexdigest()[:16]}"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _flashinfer_location() -> str:
    module = sys.modules.get(FLASHINFER.module)
    path = getattr(module, "__file__", None)
    if not path:
        return "not imported"
    try:
        return f"{path}@{os.stat(path).st_mtime_ns}"
    except OSError:
        return path


def _cuda_available() -> str:
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch not imported"
    try:
        return str(bool(torch.cuda.is_available()))
    except Exception as exc:
        return f"query failed ({type(exc).__name__})"


def _source(module: str) -> str:
    """``path:size:mtime_ns`` of ``module``'s source file, or why there is none."""
    found = sys.modules.get(module)
    path = getattr(found, "__file__", None)
    if not path:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            return f"not found ({type(exc).__name__})"
        path = spec.origin if spec is not None else None
    if not path:
        return "no source file"
    try:
        stat = os.stat(path)
    except OSError as exc:
        return f"{path}: {type(exc).__name__}"
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def key(
    feature: str,
    self_check: str,
    device: Any,
    probes: Sequence[Any],
    modules: Sequence[str] = (),
) -> dict[str, Any]:
    """Everything that can change ``feature``'s outcome of ``self_check`` here; ``modules`` are
    those its internals live in (their source files are part of the key)."""
    return {
        "format": FORMAT,
        "feature": feature,
        "self_check": self_check,
        "fi_patches": _fi_patches_fingerprint(),
        "python": sys.version,
        "versions": {name: _version(name) for name in DISTRIBUTIONS},
        "flashinfer_location": _flashinfer_location(),
        "device": {
            "arch": device.arch,
            "source": device.source,
            "detail": device.detail,
            "cuda_available": _cuda_available(),
            "properties": device_properties(),
        },
        "probes": [[p.probe, p.reason] for p in probes],
        "sources": {module: _source(module) for module in modules},
    }


def path_for(entry_key: dict[str, Any]) -> Path | None:
    """The file holding the outcome of ``entry_key`` (None when the cache is off)."""
    directory = cache_dir()
    if directory is None:
        return None
    text = json.dumps(entry_key, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return directory / f"{entry_key['feature']}-{digest}.json"


def _read(path: Path, entry_key: dict[str, Any]) -> tuple[bool, str | None]:
    """``(hit, outcome)``; a missing, unreadable, corrupt or foreign file is a miss."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False, None
    except (OSError, ValueError) as exc:
        logger.info("self-check cache %s is unreadable (%s); checking again", path, exc)
        return False, None
    outcome = data.get("outcome") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("key") != entry_key
        or not (outcome is None or isinstance(outcome, str))
        or data.get("passed") is not (outcome is None)
    ):
        logger.info("self-check cache %s does not match this key; checking again", path)
        return False, None
    return True, outcome


def _write(path: Path, entry_key: dict[str, Any], outcome: str | None) -> None:
    """Write atomically (temp file + ``os.replace``); a failure is logged once, never raised."""
    text = json.dumps(
        {"key": entry_key, "passed": outcome is None, "outcome": outcome}, indent=1, sort_keys=True
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log_once(
            logger,
            logging.WARNING,
            f"write:{path.parent}",
            "fi_patches cannot keep self-check outcomes in %s (%s); set %s to a writable "
            "directory, or to %s",
            path.parent,
            exc,
            ENV,
            OFF,
        )


def outcome(
    feature: str,
    self_check: str,
    device: Any,
    probes: Sequence[Any],
    run: Callable[[], str | None],
    modules: Sequence[str] = (),
) -> str | None:
    """``run()`` (the check: None when it passes, else why not), or the outcome an earlier
    process recorded under the same key. An exception from ``run`` propagates, not stored."""
    entry_key = key(feature, self_check, device, probes, modules)
    path = path_for(entry_key)
    if path is not None and not _bypass:
        hit, cached = _read(path, entry_key)
        if hit:
            logger.debug("feature %s: self-check outcome reused from %s", feature, path)
            return cached
    result = run()
    if path is not None:
        _write(path, entry_key, result)
        logger.debug("feature %s: self-check outcome stored in %s", feature, path)
    return result
