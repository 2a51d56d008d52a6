"""Process-wide pins: the default table applied for the life of the process once FlashInfer is
imported (before or after this call), through a post-import hook, and ``disable()`` to take
every patch off again. ``import fi_patches.auto`` and the ``FI_PATCHES_AUTO`` start-up hook
use this; a consumer never crashes because of it: problems are logged once and leave
FlashInfer stock."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from fi_patches import _import_hooks
from fi_patches import _state as process
from fi_patches import _words as words
from fi_patches._logging import get_logger
from fi_patches.internals.flashinfer import FLASHINFER

logger = get_logger(__name__)


@dataclass
class _State:
    hook_registered: bool = False
    table: Any = None
    held: list[Any] = field(default_factory=list)
    """The holds this activation keeps (:mod:`fi_patches.pinning.installation`)."""
    outcome: str = "not requested"


_lock = threading.RLock()
_state = _State()


def _apply(module: Any = None) -> None:
    """The post-import hook: activate the default table, or log why not (never raises)."""
    from fi_patches.pins.errors import PinTableError

    with _lock:
        if not process.requested() or _state.table is not None:
            return
        if not _state.held:
            from fi_patches.ranks import automatic

            guard = automatic.arm()
            if guard is not None:
                _state.held.append(guard)
        try:
            from fi_patches.pinning import stack
            from fi_patches.pinning.context import applicable
            from fi_patches.pinning.index import runner_names
            from fi_patches.pinning.installation import hold_for

            active, sections = applicable(None, _process_wide())
            if active is None:
                _state.outcome = "nothing to pin (see earlier log lines, if any)"
                logger.info("fi_patches.auto: %s", _state.outcome)
                return
            _state.held.append(hold_for(runner_names(active)))
            stack.add_process_table(active)
            _state.table = active
            _state.outcome = f"pinning the {words.sections(sections)} entries from {active.source}"
            logger.info("fi_patches.auto: %s", _state.outcome)
        except PinTableError as exc:
            _state.outcome = f"left FlashInfer stock: {exc.one_line()}"
            logger.error(
                "fi_patches.auto left FlashInfer stock because of its pins: %s", exc.one_line()
            )
        except Exception as exc:
            _state.outcome = f"left FlashInfer stock: {type(exc).__name__}: {exc}"
            logger.exception("fi_patches.auto left FlashInfer stock after an unexpected error")


def _process_wide() -> str:
    """What asked for the process-wide pins, as the subject of a log line: the file
    ``FI_PATCHES_PINS`` names, else the table ``register_pins()`` set."""
    from fi_patches import _env

    path = _env.get(_env.PINS)
    if path:
        return f"fi_patches, applying {_env.PINS.name}={path} process-wide,"
    return "fi_patches, applying the table register_pins() set process-wide,"


def enable() -> None:
    """Apply the default pin table (``FI_PATCHES_PINS``) for the life of the process, now if
    FlashInfer is imported, else when it is. Idempotent."""
    from fi_patches.pinning import stack

    with _lock:
        process.set_requested(True)
        stack.resume()
        if FLASHINFER.module in sys.modules:
            _apply()  # imported already (the start-up hook calls this just after the import)
        elif not _state.hook_registered:
            _state.hook_registered = True
            _import_hooks.when_imported(FLASHINFER.module, _apply)


def disable() -> None:
    """Remove every fi_patches patch and restore FlashInfer's original objects.

    Process-wide pins stop; ``pinned_tactics()`` blocks still open become inert until they
    exit (their exit is harmless, and a later :func:`enable` does not bring them back), and
    preseed blocks' pins stop answering the tuner's lookups. A later :func:`enable` starts
    over.
    """
    from fi_patches.pinning import stack
    from fi_patches.pinning.installation import PINNING
    from fi_patches.ranks.automatic import GUARD

    with _lock:
        process.set_requested(False)
        if _state.table is not None:
            stack.remove_process_table(_state.table)
        for hold in reversed(_state.held):
            hold.release()
        _state.table, _state.held = None, []
        _state.outcome = "disabled"
        stack.leave_all()
        for installation in (PINNING, GUARD):
            installation.revoke()
        if "fi_patches.vllm.route" in sys.modules:  # the vLLM route, where the plugin armed it
            sys.modules["fi_patches.vllm.route"].remove()
    logger.info("fi_patches: every patch removed")


def requested() -> bool:
    """Whether process-wide pins are requested (``fi_patches.auto``, ``enable()``)."""
    return process.requested()


def outcome() -> str:
    """What the process-wide activation did, in a sentence."""
    return _state.outcome
