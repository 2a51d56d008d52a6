"""Activation: the process-wide pins, ``disable()``, and what the vLLM and SGLang plugins share.

Process-wide pins (the lifecycle entry :data:`PROCESS_PINS`): the default table applied for the
life of the process once FlashInfer is imported (before or after :func:`enable`), through a
post-import hook. ``import fi_patches.auto``, the ``FI_PATCHES_AUTO`` start-up hook and the host
plugins use this; a consumer never crashes because of it: problems are logged once and leave
FlashInfer stock. :func:`disable` uninstruments every patch set of the lifecycle registry
(:data:`fi_patches.startup.LIFECYCLE`).

The host plugins' shared part: showing fi_patches' lines in the host's log, and activating the
default pins once the user opted in and the plugin's feature passes its gates. Neither raises
into the host; each returns the level and text of the one line to log."""

from __future__ import annotations

import importlib.metadata
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fi_patches import _text as words
from fi_patches import startup as process
from fi_patches._logging import ROOT, get_logger
from fi_patches.compat.features import Feature
from fi_patches.internals import Dependency
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
    from fi_patches.pins.reading import PinTableError

    with _lock:
        if not process.pins_requested() or _state.table is not None:
            return
        if not _state.held:
            from fi_patches import ranks

            guard = ranks.arm()
            if guard is not None:
                _state.held.append(guard)
        try:
            from fi_patches.pinning import stack
            from fi_patches.pinning.index import runner_names
            from fi_patches.pinning.installation import hold_for
            from fi_patches.pinning.validate import applicable

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
        process.set_pins_requested(True)
        stack.resume()
        if FLASHINFER.module in sys.modules:
            _apply()  # imported already (the start-up hook calls this just after the import)
        elif not _state.hook_registered:
            _state.hook_registered = True
            process.when_imported(FLASHINFER.module, _apply)


def disable() -> None:
    """Remove every fi_patches patch and restore FlashInfer's original objects: every patch set
    of the lifecycle registry is uninstrumented (:func:`fi_patches.startup.disable`).

    Process-wide pins stop; ``pinned_tactics()`` blocks still open become inert until they
    exit (their exit is harmless, and a later :func:`enable` does not bring them back), and
    preseed blocks' pins stop answering the tuner's lookups. A later :func:`enable` starts
    over.
    """
    with _lock:
        process.disable()
    logger.info("fi_patches: every patch removed")


def _stop() -> None:
    """Take the process-wide pins off: their table, their holds, and every open block's pins."""
    from fi_patches.pinning import stack

    with _lock:
        process.set_pins_requested(False)
        if _state.table is not None:
            stack.remove_process_table(_state.table)
        for hold in reversed(_state.held):
            hold.release()
        _state.table, _state.held = None, []
        _state.outcome = "disabled"
        stack.leave_all()


class _ProcessPins:
    """The process-wide pins' lifecycle entry: :func:`enable` instruments, and uninstrumenting
    releases their holds on the pinning wrappers and the rank guard, and every open block's
    pins (the wrappers themselves are the ``pinning`` entry's)."""

    name = "process_pins"

    @property
    def installed(self) -> bool:
        return _state.table is not None or bool(_state.held)

    def instrument(self) -> None:
        enable()

    def uninstrument(self) -> None:
        _stop()


PROCESS_PINS = _ProcessPins()


def requested() -> bool:
    """Whether process-wide pins are requested (``fi_patches.auto``, ``enable()``)."""
    return process.pins_requested()


def outcome() -> str:
    """What the process-wide activation did, in a sentence."""
    return _state.outcome


# The host plugins' shared part (vLLM's and SGLang's entry points).


class HostLogHandler(logging.Handler):
    """Hands each fi_patches record to the handlers the host's logger has when it is emitted
    (hosts configure them late, often after plugins load), so the line shows in the host's log
    in its format; to Python's last-resort stderr handler when it has none, as for any
    unhandled warning."""

    def __init__(self, host_logger: str) -> None:
        super().__init__()
        self.host_logger = host_logger

    def emit(self, record: logging.LogRecord) -> None:
        handlers = logging.getLogger(self.host_logger).handlers
        if not handlers and record.levelno >= logging.WARNING and logging.lastResort:
            logging.lastResort.handle(record)
        for handler in handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def join_host_log(host_logger: str) -> None:
    """Show fi_patches' INFO lines in the host's log when nothing else shows them: the host
    may configure only its own logger, and Python drops INFO records that find no handler."""
    ours = logging.getLogger(ROOT)
    if ours.handlers or logging.getLogger().handlers:
        return  # the user's (or the host's root) logging configuration decides
    ours.addHandler(HostLogHandler(host_logger))
    if ours.level == logging.NOTSET:
        ours.setLevel(logging.INFO)


def activate_pins(
    feature: Feature,
    dependency: Dependency,
    self_check: Callable[..., str | None],
    host: str,
    why: str,
) -> tuple[int, str, bool]:
    """Activate fi_patches' default pins for a plugin whose user opted in (``why`` says how):
    the feature's gates as ``doctor`` evaluates them (the host installed, verified and probed,
    its self-check), then the default table. The level and text of the line to log, and
    whether it activated; on any problem FlashInfer is left stock."""
    from fi_patches.compat.features import NO_DEVICE, check_dependency

    problem = check_dependency(feature, dependency).problem
    if problem is None:
        failed = self_check(NO_DEVICE)
        problem = f"self-check failed: {failed}." if failed else None
    if problem is not None:
        return logging.WARNING, f"left {host} and FlashInfer stock: {problem}", False
    from fi_patches.pins.reading import PinTableError
    from fi_patches.pins.table import default_pins

    try:
        table = default_pins()
    except PinTableError as exc:
        why_not = exc.one_line()
        return (
            logging.ERROR,
            f"left {host} and FlashInfer stock because of its pins: {why_not}",
            False,
        )
    enable()
    from fi_patches._text import section_counts

    counts = section_counts(table.sections)
    pins = f"pins from {table.source} ({counts})" if table else "no pins"
    return logging.INFO, f"active ({why}): {pins}, applied when FlashInfer is imported", True


def entry_point_problem(group: str, name: str, value: str) -> str | None:
    """None when fi_patches' entry point ``name = value`` is installed in ``group``, else what
    is wrong."""
    found = [ep for ep in importlib.metadata.entry_points(group=group) if ep.name == name]
    if not found:
        return f"no entry point {name!r} in {group!r}: reinstall fi_patches"
    if found[0].value != value:
        return f"entry point {name!r} is {found[0].value!r}"
    return None


class Entry:
    """A plugin's entry point: runs ``activate`` once per process (the host may load plugins
    from several places), never raises into the host, and logs one line through ``logger``,
    attributed to the plugin module's caller."""

    def __init__(
        self,
        prefix: str,
        host: str,
        host_logger: str,
        activate: Callable[[], tuple[int, str]],
        logger: logging.Logger,
    ) -> None:
        self.prefix, self.host, self.host_logger = prefix, host, host_logger
        self.activate, self.logger = activate, logger
        self.outcome: str | None = None
        self._lock = threading.Lock()

    def run(self) -> None:
        with self._lock:
            if self.outcome is not None:
                return
            try:
                join_host_log(self.host_logger)
                level, self.outcome = self.activate()
            except Exception as exc:  # never into the host
                level = logging.ERROR
                error = f"{type(exc).__name__}: {exc}"
                self.outcome = f"left {self.host} stock after an unexpected error ({error})"
            self.logger.log(level, "%s: %s", self.prefix, self.outcome, stacklevel=2)
