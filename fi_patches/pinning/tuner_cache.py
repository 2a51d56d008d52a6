"""``AutoTuner.search_cache`` while tuning: a winner cached before the pins for a pinned
problem counts as a miss, so the tuner profiles that problem again over the pin alone.
Lookups outside tuning, and every unpinned problem, get FlashInfer's answer unchanged."""

from __future__ import annotations

import functools
import logging
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.features import FEATURES
from fi_patches.internals import flashinfer as fi
from fi_patches.pinning.stack import current_index, find
from fi_patches.pinning.targets import PinnedRunner

logger = get_logger(__name__)

_MISS = (False, 0, -1, None)


_TARGETS: dict[str, PinnedRunner] = {t.class_name: t for f in FEATURES for t in f.runners}


def _pinned_miss(result: Any, args: tuple[Any, ...], kwargs: dict[str, Any], index: Any) -> bool:
    """Whether a tuner cache hit is a pinned problem's non-pinned tactic (to be re-tuned)."""
    if not result[0]:
        return False
    runner_id, tactic = result[1], result[2]
    runners = args[1] if len(args) > 1 else kwargs["runners"]
    shapes = args[2] if len(args) > 2 else kwargs["input_shapes"]
    inputs = args[4] if len(args) > 4 else kwargs.get("inputs")
    runner = runners[runner_id]
    target = _TARGETS.get(type(runner).__name__)
    if target is None or inputs is None or type(runner).__module__ != target.module:
        return False
    problem = target.problem(inputs, shapes)
    if problem is None:
        return False
    entry = find(index, target.section, *problem)
    if entry is None or (not target.silenced and target.normalize(tactic) == entry.tactic):
        return False
    logger.debug(
        "tuning: cached tactic %s for pinned n=%d k=%d rows=%d is not the pin %s; re-tuning",
        tactic,
        *problem,
        entry.tactic,
    )
    return True


def search_cache_replacement(original: Any, gate: Any) -> Any:
    """``AutoTuner.search_cache`` that, while tuning, misses on a pinned problem's stale hit.
    Everything after FlashInfer's own lookup runs under one guard: on any surprise the result is
    FlashInfer's, and the surprise is logged once."""

    @functools.wraps(original)
    def search_cache(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        try:
            if not gate.active or not fi.is_tuning(self):
                return result
            index = current_index()
            if index is not None and _pinned_miss(result, args, kwargs, index):
                return _MISS
        except Exception:
            log_once(
                logger,
                logging.WARNING,
                "search_cache",
                "fi_patches could not inspect a tuner cache hit; keeping FlashInfer's result",
                exc_info=True,
            )
        return result

    return search_cache
