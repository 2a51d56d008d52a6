"""The interpreter start-up hook: ``fi_patches_auto.pth`` in site-packages calls
:func:`install` when ``FI_PATCHES_AUTO`` is set (in the manner of coverage's process start-up
hook). Without the variable the ``.pth`` line only reads ``os.environ``.

:func:`install` registers a hook on ``import flashinfer`` (:mod:`fi_patches._import_hooks`)
that activates the default pins (:func:`fi_patches.activation.enable`) once FlashInfer's own
import ran. It imports nothing beyond what the interpreter has loaded already: a serving host
starts many workers, and each pays what this module costs.
"""

from __future__ import annotations

import os

from fi_patches import _import_hooks

TYPE_CHECKING = False  # not typing's: importing typing would cost every interpreter start
if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType

ENV = "FI_PATCHES_AUTO"
"""``fi_patches._env.AUTO``, spelled out: this module imports nothing, as every interpreter start
pays for what it imports (``tests/test_startup_hook.py`` checks the two agree)."""
PTH_NAME = "fi_patches_auto.pth"
TARGET = "flashinfer"

PTH_LINE = (
    f"import os; os.environ.get({ENV!r}, '0') not in ('', '0') and "
    "__import__('fi_patches.startup').startup.install()"
)
"""The one line of ``fi_patches_auto.pth`` (``site`` runs lines that start with ``import``)."""


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``FI_PATCHES_AUTO`` asks for activation at start-up (as the ``.pth`` reads it)."""
    value = (os.environ if environ is None else environ).get(ENV, "0")
    return value not in ("", "0")


def _activate(module: ModuleType) -> None:
    try:
        from fi_patches.activation import enable

        enable()
    except Exception:
        import logging

        logging.getLogger("fi_patches.startup").exception(
            "fi_patches' start-up hook failed; FlashInfer is left stock"
        )


def install() -> None:
    """Activate the default pins when FlashInfer is imported (at once if it already is).
    Idempotent; never raises, as it runs at interpreter start."""
    try:
        if not pending():  # else the .pth line ran again (two site directories)
            _import_hooks.when_imported(TARGET, _activate)
    except Exception:
        import logging

        logging.getLogger("fi_patches.startup").exception(
            "fi_patches' start-up hook could not be installed; FlashInfer is left stock"
        )


def remove() -> None:
    """Stop waiting for ``import flashinfer`` (if the hook still waits)."""
    _import_hooks.discard(TARGET, _activate)


def pending() -> bool:
    """Whether the start-up hook still waits for ``import flashinfer``."""
    return _import_hooks.waiting(TARGET, _activate)
