"""What a patched package this process has: its version (read without importing it) and whether
it imports (FlashInfer 0.6.x-0.7.0.post1 fail on CPU-only torch)."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import threading
from dataclasses import dataclass

from packaging.version import Version

from fi_patches._logging import get_logger
from fi_patches._untrusted import error_text
from fi_patches.compat.versions import parse_version
from fi_patches.internals import Dependency
from fi_patches.internals.flashinfer import FLASHINFER

logger = get_logger(__name__)


@dataclass(frozen=True)
class Installed:
    """An installed package: ``version`` is None when it is missing or unparsable."""

    present: bool
    version_text: str | None
    import_error: str | None

    @property
    def version(self) -> Version | None:
        return parse_version(self.version_text) if self.version_text else None

    @property
    def importable(self) -> bool:
        return self.present and self.import_error is None

    @property
    def label(self) -> str:
        """A short text for tables: the version, or why there is none."""
        if not self.present:
            return "not installed"
        return self.version_text or "unknown version"


_lock = threading.RLock()
"""Re-entrant: importing FlashInfer here runs its post-import hooks (``fi_patches.auto``), which
ask for the installed FlashInfer again on this thread."""
_cached: dict[str, Installed] = {}


def _metadata_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _probe(dependency: Dependency) -> Installed:
    if importlib.util.find_spec(dependency.module) is None:
        return Installed(present=False, version_text=None, import_error=None)
    version_text = _metadata_version(dependency.distribution)
    try:
        module = importlib.import_module(dependency.module)
    except Exception as exc:  # any import-time failure disables its features, with this reason
        logger.debug("import %s failed: %s", dependency.module, error_text(exc))
        return Installed(present=True, version_text=version_text, import_error=error_text(exc))
    if version_text is None:
        version_text = getattr(module, "__version__", None)
    return Installed(present=True, version_text=version_text, import_error=None)


def installed(dependency: Dependency, refresh: bool = False) -> Installed:
    """``dependency`` as installed here, probed once per process (``refresh`` probes again)."""
    with _lock:
        found = _cached.get(dependency.module)
        if found is None or refresh:
            found = _cached[dependency.module] = _probe(dependency)
        return found


def installed_flashinfer(refresh: bool = False) -> Installed:
    """The installed FlashInfer, probed once per process (``refresh`` probes again)."""
    return installed(FLASHINFER, refresh)


def flashinfer_unusable() -> str | None:
    """None where FlashInfer imports, else why not, as a clause for a CLI's one line."""
    found = installed_flashinfer()
    if not found.present:
        return "FlashInfer (flashinfer-python) is not installed here"
    if found.import_error is not None:
        return f"FlashInfer does not import here ({found.import_error})"
    return None


def forget() -> None:
    """Probe every package again on next use."""
    with _lock:
        _cached.clear()
