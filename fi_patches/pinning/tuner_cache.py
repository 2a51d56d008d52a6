"""``AutoTuner.search_cache`` for pinned keys, of any op.

* A key a ``mode="preseed"`` block's entry serves (:mod:`fi_patches.pinning.serving`: its
  runner is among the lookup's and offers its tactic) is answered with its pin, in this
  context, while tuning and serving alike: tuning it profiles nothing, and nothing is written
  into FlashInfer's cache, so leaving the block (in any order, from any thread) leaves the
  cache as it was.
* While tuning, a winner cached for a pinned key that is not the pin (tuned before the block,
  or by another of the op's runners) is a miss, so the tuner profiles the key again over the
  pin alone; the pinned runner's own entry is looked up first.
* Everything else gets FlashInfer's answer unchanged. After FlashInfer's own lookup, everything
  runs under one guard: on any surprise the result is FlashInfer's, and the surprise is logged
  once.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.internals import tuner as fi_tuner
from fi_patches.pinning import stack
from fi_patches.pinning.index import PRESEED
from fi_patches.pinning.serving import Listing, serving_pin, signature, stock_tactics
from fi_patches.pinning.tuning_calls import CALL
from fi_patches.pins.keys import as_tactic

logger = get_logger(__name__)

_MISS = (False, 0, -1, None)
_POSITIONAL = ("runners", "input_shapes", "tuning_config", "inputs")


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """``(runners, input_shapes, tuning_config, inputs)`` of a ``search_cache`` call."""
    runners = args[0] if args else kwargs["runners"]
    shapes = args[1] if len(args) > 1 else kwargs["input_shapes"]
    config = args[2] if len(args) > 2 else kwargs["tuning_config"]
    inputs = args[3] if len(args) > 3 else kwargs.get("inputs")
    return runners, shapes, config, inputs


def _listing(tuner: Any, inputs: Any, profile: Any) -> Listing | None:
    """How a lookup asks a runner's stock list: while tuning a profile (one bucket), on the
    inputs FlashInfer builds for it (built on the first asking, which is only where no verdict
    is known yet); when serving, on the call's own inputs; without inputs, not at all."""
    if inputs is None:
        return None
    if profile is None:
        return lambda runner: stock_tactics(runner, inputs, None)
    built: list[Any] = []

    def list_of(runner: Any) -> Any:
        if not built:
            built.append(fi_tuner.profile_inputs(tuner, profile, inputs))
        return stock_tactics(runner, built[0], profile)

    return list_of


def _serving(
    tuner: Any, index: Any, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, bool]:
    """The pin serving a lookup (:func:`serving_pin`), and whether it was decided before: a
    lookup while serving is decided once per index, runners and call signature, as the server
    makes the same calls again and again; one while tuning every time."""
    runners, shapes, config, inputs = _arguments(args, kwargs)
    call = CALL.get()
    if call is not None and call.op == op:
        call.config = config  # the config FlashInfer applied its overrides to
    profile = kwargs.get("validation_profile")
    key = None
    if profile is None and inputs is not None and not fi_tuner.is_tuning(tuner):
        try:
            key = ("lookup", op, tuple(map(id, runners)), shapes, signature(inputs))
            known = index.answers.get(key)
        except TypeError:  # shapes or an input that do not hash: decided afresh
            key, known = None, None
        if known is not None and all(a is b for a, b in zip(known[0], runners, strict=True)):
            return known[1], True
    pinned = serving_pin(
        index, op, runners, inputs, shapes, tuner, config, _listing(tuner, inputs, profile)
    )
    if key is not None:
        index.answers.remember(key, (tuple(runners), pinned))
    return pinned, False


def search_cache_replacement(original: Any, gate: Any) -> Any:
    """``AutoTuner.search_cache`` as the module docstring says."""

    @functools.wraps(original)
    def search_cache(self: Any, custom_op: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            index = stack.current_index() if gate.active else None
            pinned, decided = None, False
            if index is not None and index.serves_op(custom_op):
                pinned, decided = _serving(self, index, custom_op, args, kwargs)
        except Exception:
            _surprise()
            pinned, decided = None, False
        if pinned is None:
            return original(self, custom_op, *args, **kwargs)
        position, entry, tactic, _ = pinned
        if index is not None and index.modes.get(id(entry)) == PRESEED:
            return (True, position, tactic, None)
        if decided:  # a narrowing pin while serving: FlashInfer's answer, checked once already
            return original(self, custom_op, *args, **kwargs)
        result = original(self, custom_op, *args, **kwargs)
        try:
            return _checked(self, result, position, tactic, custom_op, args, kwargs, original)
        except Exception:
            _surprise()
            return result

    return search_cache


def _checked(
    tuner: Any,
    result: Any,
    position: int,
    tactic: Any,
    op: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    original: Any,
) -> Any:
    """FlashInfer's ``result`` for a key pinned by a narrowing block."""
    if result[0] and result[1] == position and as_tactic(result[2]) == tactic:
        return result
    tuning = fi_tuner.is_tuning(tuner)
    if not result[0]:
        return result
    runners, shapes, config, inputs = _arguments(args, kwargs)
    if result[1] != position:  # another runner's winner came first: the pinned runner's own
        rest = {k: v for k, v in kwargs.items() if k not in _POSITIONAL}
        rest["inputs"] = inputs
        alone = original(tuner, op, [runners[position]], shapes, config, **rest)
        if alone[0] and as_tactic(alone[2]) == tactic:
            return (True, position, alone[2], alone[3])
    if tuning:
        logger.debug("tuning %s: cached %s is not the pin %s; re-tuning", op, result[2], tactic)
        return _MISS
    log_once(
        logger,
        logging.INFO,
        f"stale:{op}:{tactic}",
        "fi_patches: FlashInfer's cache serves %s for a key of op %s pinned to %s; tune inside "
        "pinned_tactics(), or use mode='preseed', for the pin to serve",
        result[2],
        op,
        tactic,
    )
    return result


def _surprise() -> None:
    log_once(
        logger,
        logging.WARNING,
        "search_cache",
        "fi_patches could not inspect a tuner cache lookup; keeping FlashInfer's result",
        exc_info=True,
    )
