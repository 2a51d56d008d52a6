"""``pinned_tactics()``: inside it, FlashInfer's tuner is offered only the pinned tactic for
pinned problems, and every other problem sees the stock list."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.evaluate import installed_flashinfer, status_of
from fi_patches.compat.target import current_device
from fi_patches.features import PRESEED, feature_of_section, pinned_sections
from fi_patches.pins.default import REFRESHED, WeakCache, as_table, default_pins
from fi_patches.pins.schema import SECTIONS
from fi_patches.pins.table import PinTable

logger = get_logger(__name__)

_views: WeakCache[PinTable, dict[tuple[str, ...], PinTable]] = WeakCache(REFRESHED)
_views_lock = threading.Lock()


def _view(table: PinTable, sections: tuple[str, ...]) -> PinTable:
    """``table`` restricted to ``sections`` (one object per table and sections)."""
    if all(not table.entries(s) for s in SECTIONS if s not in sections):
        return table
    with _views_lock:
        views = _views.fresh().setdefault(table, {})
        view = views.get(sections)
        if view is None:
            view = PinTable(table.meta, {s: table.entries(s) for s in sections}, table.source)
            views[sections] = view
        return view


def applicable(
    table: PinTable | str | os.PathLike[str] | Mapping[str, object] | None,
    who: str = "fi_patches.pinned_tactics()",
) -> tuple[PinTable | None, tuple[str, ...]]:
    """The table to activate and the sections of it that apply here; ``(None, ())`` when
    nothing applies (the reasons are logged once, led by ``who``: what the user did that
    asked for the pins, such as a ``pinned_tactics()`` block or process-wide pins)."""
    resolved = default_pins() if table is None else as_table(table)
    from fi_patches.pinning import stack

    suspended = stack.suspended()
    if suspended is not None:
        log_once(
            logger,
            logging.WARNING,
            f"suspended:{suspended}",
            "fi_patches pins nothing: pins are suspended (%s); fi_patches.enable() resumes them",
            suspended,
        )
        return None, ()
    wanted = tuple(s for s in pinned_sections() if resolved.entries(s))
    if not wanted:
        return None, ()
    sections, ignored = [], []
    for section in wanted:
        record = status_of(feature_of_section(section).name)
        if record.enabled:
            sections.append(section)
        else:
            ignored.append(f"[[{section}]] ({record.name} {record.reason})")
    if ignored:
        log_once(
            logger,
            logging.WARNING,
            "disabled:" + ";".join(ignored),
            "%s ignores the %s pins: %s",
            who,
            "/".join(s.split(" ")[0] for s in ignored),
            "; ".join(ignored),
        )
    if not sections:
        return None, ()
    skip = resolved.skip_reason(current_device().arch)
    if skip is not None:
        log_once(
            logger,
            logging.WARNING,
            f"skip:{skip}",
            "%s skips a table: %s",
            who,
            skip,
        )
        return None, ()
    upgrade = resolved.other_release(installed_flashinfer().version)
    if upgrade is not None:
        log_once(logger, logging.INFO, f"upgrade:{upgrade}", "fi_patches: %s", upgrade)
    from fi_patches.pinning.validate import check_table

    checked = check_table(resolved, sections)
    return _view(checked, tuple(sections)), tuple(sections)


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
    from fi_patches.ranks import automatic

    hold = automatic.arm()
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
