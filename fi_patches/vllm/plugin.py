"""vLLM's general plugin: the entry point ``fi_patches`` in the group ``vllm.general_plugins``,
which vLLM's ``load_general_plugins()`` calls in every process it starts (API server, engine
core, each worker). ``VLLM_PLUGINS`` naming other plugins only keeps vLLM from calling it.

:func:`register` activates fi_patches as ``fi_patches.auto`` does (the default pin table,
``FI_PATCHES_PINS``, applied when FlashInfer is imported) and, with ``FI_PATCHES_VLLM_ROUTE=1``,
arms the routing of vLLM's cute-dsl MXFP8 linears. It is off unless the user opts in (see
:mod:`fi_patches.vllm.settings`), idempotent, never raises into vLLM, asks for no device and
imports no FlashInfer, and logs one line saying what it did.
"""

from __future__ import annotations

import logging
import threading

from fi_patches._logging import ROOT, get_logger
from fi_patches.internals import vllm as upstream

logger = get_logger(__name__)

PREFIX = "fi_patches vLLM plugin"

_lock = threading.Lock()
_outcome: str | None = None


class _VllmLogHandler(logging.Handler):
    """Hands each fi_patches record to the handlers vLLM's ``vllm`` logger has when it is
    emitted (vLLM configures them when it builds its engine, often after plugins load), so the
    line shows in vLLM's log in vLLM's format; to Python's last-resort stderr handler when
    vLLM has none, as for any unhandled warning."""

    def emit(self, record: logging.LogRecord) -> None:
        handlers = logging.getLogger(upstream.LOGGER).handlers
        if not handlers and record.levelno >= logging.WARNING and logging.lastResort:
            logging.lastResort.handle(record)
        for handler in handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def _join_vllm_log() -> None:
    """Show fi_patches' INFO lines in vLLM's log when nothing else shows them: vLLM configures
    only its own logger, and Python drops INFO records that find no handler."""
    ours = logging.getLogger(ROOT)
    if ours.handlers or logging.getLogger().handlers:
        return  # the user's logging configuration decides
    ours.addHandler(_VllmLogHandler())
    if ours.level == logging.NOTSET:
        ours.setLevel(logging.INFO)


def _activate() -> tuple[int, str]:
    """Do what the settings ask; the level and text of the one line to log."""
    from fi_patches.vllm.settings import read

    settings = read()
    if not settings.active:
        return logging.DEBUG, f"off ({settings.why})"
    # The vllm_plugin feature's gates (as doctor evaluates them), without the compat layer's
    # own log line: vLLM installed, verified and probed, and this entry point installed.
    from fi_patches.compat.evaluate import NO_DEVICE, check_dependency
    from fi_patches.features import VLLM_PLUGIN
    from fi_patches.vllm.self_check import plugin_self_check

    problem = check_dependency(VLLM_PLUGIN, upstream.VLLM).problem
    if problem is None:
        failed = plugin_self_check(NO_DEVICE)
        problem = f"self-check failed: {failed}." if failed else None
    if problem is not None:
        return logging.WARNING, f"left vLLM and FlashInfer stock: {problem}"
    from fi_patches.pins.default import default_pins
    from fi_patches.pins.errors import PinTableError

    try:
        table = default_pins()
    except PinTableError as exc:
        why = exc.one_line()
        return logging.ERROR, f"left vLLM and FlashInfer stock because of its pins: {why}"
    from fi_patches import activation

    activation.enable()
    counts = ", ".join(f"{len(e)} {name}" for name, e in table.sections.items() if e)
    pins = f"pins from {table.source} ({counts})" if table else "no pins"
    done = [f"active ({settings.why}): {pins}, applied when FlashInfer is imported"]
    if settings.route:
        from fi_patches.vllm import route

        done.append(route.arm())
    return logging.INFO, "; ".join(done)


def register() -> None:
    """The plugin's entry point. Never raises; a second call in a process does nothing."""
    global _outcome
    with _lock:
        if _outcome is not None:
            return
        try:
            _join_vllm_log()
            level, _outcome = _activate()
        except Exception as exc:  # never into vLLM
            level = logging.ERROR
            _outcome = f"left vLLM stock after an unexpected error ({type(exc).__name__}: {exc})"
        logger.log(level, "%s: %s", PREFIX, _outcome)


def outcome() -> str | None:
    """What :func:`register` did in this process, or None before it ran."""
    return _outcome
