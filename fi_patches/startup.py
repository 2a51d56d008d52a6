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

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
"""``fi_patches._env``'s boolean words, spelled out for the same reason (the test checks)."""

PTH_LINE = (
    f"import os; os.environ.get({ENV!r}, '').strip().lower() not in {FALSE_WORDS!r} and "
    "(u := __import__('importlib.util').util).find_spec('fi_patches') is not None and "
    "u.find_spec('fi_patches.startup') is not None and "
    "__import__('fi_patches.startup').startup.from_pth()"
)
"""The one line of ``fi_patches_auto.pth`` (``site`` runs lines that start with ``import``).
It asks for fi_patches only when the variable is not off, and is silent when fi_patches is
gone (the file left behind by ``pip uninstall`` of an editable install)."""


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``FI_PATCHES_AUTO`` asks for activation at start-up (as ``_env`` reads a
    boolean: a value neither on nor off is off)."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return value.strip().lower() in TRUE_WORDS


def from_pth() -> None:
    """What the ``.pth`` line runs when the variable is not off: :func:`install` when it is on;
    otherwise (a value that is not a boolean) the one warning ``_env`` gives, and nothing else."""
    if requested():
        install()
        return
    try:
        from fi_patches import _env

        _env.flag(_env.AUTO)
    except Exception:
        return  # at interpreter start; the hook stays off either way


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
