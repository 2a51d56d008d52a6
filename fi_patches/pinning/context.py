"""``pinned_tactics()``: inside it, FlashInfer's tuner is offered only the pinned tactic for
pinned problems, and every other problem sees the stock list."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.device import current_device
from fi_patches.compat.evaluate import status_of
from fi_patches.compat.installed import installed_flashinfer
from fi_patches.pins.default import as_table, default_pins
from fi_patches.pins.table import PinTable

logger = get_logger(__name__)

FEATURE = "pinned_tactics"
SECTIONS = ("low_latency",)


def _applicable(
    table: PinTable | str | os.PathLike[str] | Mapping[str, object] | None,
) -> PinTable | None:
    """The table to activate, or None (logged once) when the feature or the table is off."""
    record = status_of(FEATURE)
    if not record.enabled:
        log_once(
            logger,
            logging.WARNING,
            f"disabled:{record.reason}",
            "fi_patches.pinned_tactics() does nothing: %s",
            record.reason,
        )
        return None
    resolved = default_pins() if table is None else as_table(table)
    skip = resolved.skip_reason(current_device().arch, installed_flashinfer().version)
    if skip is not None:
        log_once(
            logger,
            logging.WARNING,
            f"skip:{skip}",
            "fi_patches.pinned_tactics() skips a table: %s",
            skip,
        )
        return None
    if not any(resolved.entries(section) for section in SECTIONS):
        return None
    from fi_patches.pinning.validate import check_table

    check_table(resolved, SECTIONS)
    return resolved


@contextmanager
def pinned_tactics(
    table: PinTable | str | os.PathLike[str] | Mapping[str, object] | None = None,
) -> Iterator[PinTable | None]:
    """Offer FlashInfer's tuner only the pinned tactic for the problems ``table`` pins.

    ``table`` is a :class:`PinTable`, a path to a TOML/JSON pin file, a mapping, or None for
    the default table (``FI_PATCHES_PINS``, else :func:`register_pins`). Blocks nest (the inner
    table wins for its entries) and are local to the thread or task that entered them. A bad
    table raises :class:`PinTableError` before anything is applied; when the feature is off or
    the table was chosen on another device or release, the block does nothing and logs why
    once. Yields the active table, or None when nothing is pinned.
    """
    resolved = _applicable(table)
    if resolved is None:
        yield None
        return
    from fi_patches.pinning import stack
    from fi_patches.pinning.hooks import installation

    installation.acquire()
    try:
        token = stack.push(resolved)
        try:
            yield resolved
        finally:
            stack.pop(token)
    finally:
        installation.release()
