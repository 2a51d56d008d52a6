"""What FlashInfer this process has: its version (read without importing it) and whether
``import flashinfer`` works (0.6.x-0.7.0.post1 fail on CPU-only torch)."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import threading
from dataclasses import dataclass

from packaging.version import Version

from fi_patches._logging import get_logger
from fi_patches.compat.versions import parse_version

logger = get_logger(__name__)

DISTRIBUTION = "flashinfer-python"


@dataclass(frozen=True)
class InstalledFlashInfer:
    """The installed FlashInfer: ``version`` is None when it is missing or unparsable."""

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
_cached: InstalledFlashInfer | None = None


def _metadata_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def _probe() -> InstalledFlashInfer:
    if importlib.util.find_spec("flashinfer") is None:
        return InstalledFlashInfer(present=False, version_text=None, import_error=None)
    version_text = _metadata_version()
    try:
        module = importlib.import_module("flashinfer")
    except Exception as exc:  # any import-time failure disables every feature, with this reason
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        error = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
        logger.debug("import flashinfer failed: %s", error)
        return InstalledFlashInfer(present=True, version_text=version_text, import_error=error)
    if version_text is None:
        version_text = getattr(module, "__version__", None)
    return InstalledFlashInfer(present=True, version_text=version_text, import_error=None)


def installed_flashinfer(refresh: bool = False) -> InstalledFlashInfer:
    """The installed FlashInfer, probed once per process (``refresh`` probes again)."""
    global _cached
    with _lock:
        if _cached is None or refresh:
            _cached = _probe()
        return _cached
