"""Which GPU architecture this process targets: ``FI_PATCHES_DEVICE`` (for offline validation
and CPU tests) or else the current CUDA device."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

ENV = "FI_PATCHES_DEVICE"

_ARCH = re.compile(r"^sm_?(\d{2,3})[af]?$")


@dataclass(frozen=True)
class Device:
    """``arch`` is like ``sm_103``; None when there is no CUDA device (``detail`` says why)."""

    arch: str | None
    source: str
    detail: str

    @property
    def sm_version(self) -> int | None:
        """The arch as FlashInfer's runners take it (103 for sm_103)."""
        return int(self.arch[3:]) if self.arch else None

    @property
    def label(self) -> str:
        return self.arch if self.arch else f"none ({self.detail})"


def normalize_arch(text: str) -> str | None:
    """``sm_103``, ``sm103``, ``sm_103a`` -> ``sm_103``; None when ``text`` is not an arch."""
    match = _ARCH.match(text.strip().lower())
    return f"sm_{match.group(1)}" if match else None


def current_device() -> Device:
    """The target device, read now (cheap; the compat layer caches its verdicts, not this)."""
    override = os.environ.get(ENV)
    if override:
        arch = normalize_arch(override)
        if arch is None:
            return Device(None, "env", f"{ENV}={override!r} is not an arch such as sm_103")
        return Device(arch, "env", f"{ENV}={override}")
    try:
        import torch
    except Exception as exc:
        return Device(None, "none", f"torch is not importable ({type(exc).__name__})")
    try:
        if not torch.cuda.is_available():
            return Device(None, "none", "no CUDA device")
        major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    except Exception as exc:
        return Device(None, "none", f"CUDA query failed ({type(exc).__name__}: {exc})")
    return Device(f"sm_{major}{minor}", "torch.cuda", torch.cuda.get_device_name())
