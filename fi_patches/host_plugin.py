"""What the vLLM and SGLang plugins share: showing fi_patches' lines in the host's log, and
activating the default pins once the user opted in and the plugin's feature passes its gates.
Neither raises into the host; each returns the level and text of the one line to log."""

from __future__ import annotations

import logging
from collections.abc import Callable

from fi_patches._logging import ROOT
from fi_patches.compat.feature import Feature
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
    counts = ", ".join(f"{len(e)} {name}" for name, e in table.sections.items() if e)
    pins = f"pins from {table.source} ({counts})" if table else "no pins"
    return logging.INFO, f"active ({why}): {pins}, applied when FlashInfer is imported", True
