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
from fi_patches.pinning.index import MISS, PRESEED
from fi_patches.pinning.serving import Listing, serving_pin, stock_tactics
from fi_patches.pinning.tuning_calls import CALL
from fi_patches.pins.keys import as_tactic

logger = get_logger(__name__)

_MISS = (False, 0, -1, None)


def _listing(tuner: Any, inputs: Any, profile: Any, shapes: Any = None) -> Listing | None:
    """How a lookup asks a runner's stock list: while tuning a profile (one bucket), on the
    inputs FlashInfer builds for it (built on the first asking, which is only where no verdict
    is known yet); when serving, on the call's own inputs; without inputs, not at all."""
    if inputs is None:
        return None
    if profile is not None:
        build = functools.partial(fi_tuner.profile_inputs, tuner, profile, inputs)
    elif shapes is not None and fi_tuner.is_tuning(tuner):
        # A release whose lookup while tuning names no profile (0.7.0 passes only the bucket's
        # shapes): inputs of those shapes, as FlashInfer builds them for the bucket.
        build = functools.partial(_shaped, inputs, shapes)
    else:
        return lambda runner: stock_tactics(runner, inputs, None)
    built: list[Any] = []

    def list_of(runner: Any) -> Any:
        if not built:
            built.append(build())
        return stock_tactics(runner, built[0], profile)

    return list_of


def _shaped(inputs: Any, shapes: Any) -> list[Any]:
    """``inputs`` with each tensor whose shape is not its bucket's replaced by an empty one of
    that shape (same dtype and device)."""
    out = []
    for x, shape in zip(inputs, shapes, strict=False):
        size = tuple(int(d) for d in shape)
        out.append(x.new_empty(size) if hasattr(x, "new_empty") and tuple(x.shape) != size else x)
    return out


def _serving(
    tuner: Any,
    index: Any,
    op: Any,
    runners: Any,
    shapes: Any,
    config: Any,
    inputs: Any,
    profile: Any,
) -> Any:
    """The pin serving a lookup (:func:`serving_pin`): a lookup while serving is decided once
    per index, runners and call signature, as the server makes the same calls again and again;
    one while tuning every time."""
    if profile is None and not fi_tuner.is_tuning(tuner):  # a serving lookup, as choose_one's
        if inputs is None:
            return None  # a lookup without tensors: no pin can be checked, FlashInfer answers
        listed = tuple(runners)
        try:
            key = (
                op,
                tuple(map(id, listed)),
                shapes,
                tuple([getattr(x, "dtype", x) for x in inputs]),
            )
            known = index.answers.recall(key, listed)
        except TypeError:  # shapes or an input that do not hash: decided afresh
            key, known = None, MISS
        if known is not MISS:
            return known
        pinned = serving_pin(
            index, op, listed, inputs, shapes, tuner, config, _listing(tuner, inputs, None)
        )
        if key is not None:
            index.answers.keep(key, listed, pinned)
        return pinned
    call = CALL.get()
    if call is not None and call.op == op:
        call.config = config  # the config FlashInfer applied its overrides to
    return serving_pin(
        index, op, runners, inputs, shapes, tuner, config, _listing(tuner, inputs, profile, shapes)
    )


def search_cache_replacement(original: Any, gate: Any) -> Any:
    """``AutoTuner.search_cache`` as the module docstring says, taking FlashInfer's own
    parameters (a lookup is on every serving call of a tuned op: nothing is packed again)."""

    @functools.wraps(original)
    def search_cache(
        self: Any,
        custom_op: Any,
        runners: Any,
        input_shapes: Any,
        tuning_config: Any,
        inputs: Any = None,
        **kwargs: Any,
    ) -> Any:
        try:
            index = stack.current_index() if gate.active else None
            pinned = None
            if index is not None and custom_op in index.served:
                pinned = _serving(
                    self,
                    index,
                    custom_op,
                    runners,
                    input_shapes,
                    tuning_config,
                    inputs,
                    kwargs.get("validation_profile"),
                )
        except Exception:
            _surprise()
            pinned = None
        if pinned is None:
            return original(self, custom_op, runners, input_shapes, tuning_config, inputs, **kwargs)
        position, entry, tactic, _ = pinned
        if index is not None and index.modes.get(id(entry)) == PRESEED:
            return (True, position, tactic, None)
        result = original(self, custom_op, runners, input_shapes, tuning_config, inputs, **kwargs)
        try:
            call = (runners, input_shapes, tuning_config, inputs, kwargs)
            return _checked(self, result, position, tactic, custom_op, call, original)
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
    call: tuple[Any, Any, Any, Any, dict[str, Any]],
    original: Any,
) -> Any:
    """FlashInfer's ``result`` for a key pinned by a narrowing block."""
    if (
        result[0]
        and result[1] == position
        and (
            result[2] == tactic or as_tactic(result[2]) == tactic  # a file's list: as a tuple
        )
    ):
        return result
    tuning = fi_tuner.is_tuning(tuner)
    if not result[0]:
        return result
    runners, shapes, config, inputs, kwargs = call
    if result[1] != position:  # another runner's winner came first: the pinned runner's own
        alone = original(tuner, op, [runners[position]], shapes, config, inputs, **kwargs)
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
