"""Loggers under ``fi_patches`` and a log-once helper, so hot paths never flood a server's log."""

from __future__ import annotations

import logging
import threading

ROOT = "fi_patches"

_seen: set[tuple[str, str]] = set()
_seen_lock = threading.Lock()


def get_logger(name: str) -> logging.Logger:
    """The ``fi_patches.<name>`` logger (``name`` is the module's ``__name__`` or a suffix)."""
    if name == ROOT or name.startswith(ROOT + "."):
        return logging.getLogger(name)
    return logging.getLogger(f"{ROOT}.{name}")


def log_once(
    logger: logging.Logger, level: int, key: str, msg: str, *args: object, exc_info: bool = False
) -> bool:
    """Log ``msg`` the first time ``key`` is seen by ``logger``; True when it was logged."""
    ident = (logger.name, key)
    with _seen_lock:
        if ident in _seen:
            return False
        _seen.add(ident)
    logger.log(level, msg, *args, exc_info=exc_info)
    return True


def forget_logged() -> None:
    """Forget which keys were logged (tests use this to observe log-once behaviour)."""
    with _seen_lock:
        _seen.clear()
