"""Which tactic a wide GEMM runs: an explicit one, else a ``[[wide]]`` pin (active tables, then
the default table), else the first valid tactic of :func:`~fi_patches.wide.tactics.wide_tactics`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fi_patches._logging import get_logger, log_once
from fi_patches.wide.dtypes import MXFP8, GemmDtypes
from fi_patches.wide.tactic import Tactic, as_tactic
from fi_patches.wide.tactics import wide_tactics
from fi_patches.wide.validity import invalid_reason

logger = get_logger(__name__)


def pinned_tactic(n: int, k: int, tile: int) -> Tactic | None:
    """The tactic a ``[[wide]]`` entry gives ``(n, k, tile)``: of the tables active here, else
    of the default table (``FI_PATCHES_PINS`` or ``register_pins``)."""
    from fi_patches.pinning.resolve import wide_pin

    entry = wide_pin(n, k, tile)
    return None if entry is None else as_tactic(entry.tactic)


def choose_tactic(
    n: int,
    k: int,
    tile: int,
    rows: int,
    tactic: Sequence[int] | None = None,
    *,
    dtypes: GemmDtypes = MXFP8,
    arch: str | None = None,
    sfb_per_cta_packed: bool = False,
) -> Tactic:
    """The tactic to run; ValueError naming the limit when an explicit one is invalid. An
    invalid pin is logged once and skipped."""
    problem = (n, rows, k, 1)
    if tactic is not None:
        chosen = as_tactic(tactic)
        reason = invalid_reason(
            problem, tile, chosen, dtypes, arch=arch, sfb_per_cta_packed=sfb_per_cta_packed
        )
        if reason is not None:
            raise ValueError(f"tactic {chosen} cannot run N={n} K={k} at tile {tile}: {reason}")
        return chosen
    pin = pinned_tactic(n, k, tile)
    if pin is not None:
        reason = invalid_reason(
            problem, tile, pin, dtypes, arch=arch, sfb_per_cta_packed=sfb_per_cta_packed
        )
        if reason is None:
            return pin
        log_once(
            logger,
            logging.WARNING,
            f"bad-wide-pin:{n}:{k}:{tile}:{pin}",
            "ignoring [[wide]] pin %s for n=%d k=%d tile=%d: %s",
            pin,
            n,
            k,
            tile,
            reason,
        )
    tactics = wide_tactics(n, k, tile, dtypes=dtypes, arch=arch)
    if not tactics:
        raise ValueError(f"no valid wide tactic for N={n} K={k} at tile {tile}")
    return tactics[0]
