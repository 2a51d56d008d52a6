"""``pinned_tactics()``: inside it, FlashInfer's tuner is offered only the pinned tactic for
pinned problems, and every other problem sees the stock list."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.features import PRESEED, status_of
from fi_patches.pinning.validate import applicable
from fi_patches.pins.table import PinTable

logger = get_logger(__name__)

MODES = ("narrow", "preseed")


@contextmanager
def pinned_tactics(
    table: PinTable | str | os.PathLike[str] | Mapping[str, object] | None = None,
    mode: str = "narrow",
) -> Iterator[PinTable | None]:
    """Offer FlashInfer's tuner only the pinned tactic for the problems ``table`` pins.

    ``mode="narrow"`` (the default) narrows the tuner's candidates to the pin, so tuning
    caches the pin (and it serves after the block); inside the block, serving lookups of a
    pinned key are answered with the pin. ``mode="preseed"`` instead answers the
    tuner's cache lookups of pinned keys with the pin while the block is open, in this context,
    so tuning them profiles nothing and serving uses the pin; nothing is written into the
    tuner's cache, so leaving the block, in any order, leaves the cache as it was.

    ``table`` is a :class:`PinTable`, a path to a TOML/JSON pin file, a mapping, or None for
    the default table (``FI_PATCHES_PINS``, else :func:`register_pins`). Blocks nest (the inner
    table wins for its entries) and are local to the thread or task that entered them. A bad
    table raises :class:`PinTableError` before anything is applied; sections whose feature is
    off, and tables chosen on another device or release, do nothing and log why once. Yields
    the active table, or None when nothing is pinned. While any block is open, pins or not,
    FlashInfer's ``set_autotune_process_group`` first runs the rank guard
    (:mod:`fi_patches.ranks`).
    """
    if mode not in MODES:
        raise ValueError(f"pinned_tactics(mode={mode!r}): mode must be one of {', '.join(MODES)}")
    if mode == "preseed":
        record = status_of(PRESEED.name)
        if not record.enabled:
            log_once(
                logger,
                logging.WARNING,
                f"disabled:preseed:{record.reason}",
                "fi_patches.pinned_tactics(mode='preseed') does nothing: preseed %s",
                record.reason,
            )
            yield None
            return
    active, sections = applicable(table)
    with ExitStack() as held:
        _arm_rank_guard(held)
        if active is None:
            yield None
            return
        yield from _pinned(held, active, sections, mode)


def _arm_rank_guard(held: ExitStack) -> None:
    """Guard ``set_autotune_process_group`` while the block is open, pins or not: a rank whose
    block pins nothing (a feature off here) must still meet the other ranks' guard."""
    from fi_patches import ranks

    hold = ranks.arm()
    if hold is not None:
        held.callback(hold.release)


def _pinned(
    held: ExitStack, active: PinTable, sections: tuple[str, ...], mode: str
) -> Iterator[PinTable]:
    from fi_patches.pinning import stack
    from fi_patches.pinning.index import runner_names
    from fi_patches.pinning.installation import hold_for

    hold = hold_for(runner_names(active))
    held.callback(hold.release)
    block = stack.push(active, mode)
    try:
        yield active
    finally:
        stack.pop(block)
