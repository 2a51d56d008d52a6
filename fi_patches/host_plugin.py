"""What the vLLM and SGLang plugins share: showing fi_patches' lines in the host's log, and
activating the default pins once the user opted in and the plugin's feature passes its gates.
Neither raises into the host; each returns the level and text of the one line to log."""

from __future__ import annotations

import importlib.metadata
import logging
import threading
from collections.abc import Callable

from fi_patches._logging import ROOT
from fi_patches.features import Feature
from fi_patches.internals import Dependency


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
    from fi_patches.compat.evaluate import NO_DEVICE, check_dependency

    problem = check_dependency(feature, dependency).problem
    if problem is None:
        failed = self_check(NO_DEVICE)
        problem = f"self-check failed: {failed}." if failed else None
    if problem is not None:
        return logging.WARNING, f"left {host} and FlashInfer stock: {problem}", False
    from fi_patches.pins.default import default_pins
    from fi_patches.pins.errors import PinTableError

    try:
        table = default_pins()
    except PinTableError as exc:
        why_not = exc.one_line()
        return (
            logging.ERROR,
            f"left {host} and FlashInfer stock because of its pins: {why_not}",
            False,
        )
    from fi_patches import activation

    activation.enable()
    from fi_patches._words import section_counts

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
