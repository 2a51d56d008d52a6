"""The interpreter start-up hook: ``fi_patches_auto.pth`` in site-packages imports
``fi_patches.auto`` when ``FI_PATCHES_AUTO`` is set (in the manner of coverage's process
start-up hook). Without the variable the ``.pth`` line only reads ``os.environ``."""

from __future__ import annotations

import site
import sys
from pathlib import Path

from fi_patches import _env

ENV = _env.AUTO.name
PTH_NAME = "fi_patches_auto.pth"


def site_dirs() -> list[Path]:
    dirs = [Path(p) for p in getattr(site, "getsitepackages", lambda: [])()]
    dirs += [Path(p) for p in sys.path if p.endswith("site-packages")]
    return list(dict.fromkeys(dirs))


def hook_installed() -> bool:
    """Whether this interpreter's site-packages holds the start-up hook."""
    return any((d / PTH_NAME).is_file() for d in site_dirs())
