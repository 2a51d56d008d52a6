"""``get_valid_tactics`` of a pinned runner class: for a pinned problem it offers only the pin
(checked once against the stock list), for every other problem the stock list.

``forward`` keeps validating against the stock list, so a tactic tuned earlier still runs.
Any surprise falls back to FlashInfer's own answer and is logged once.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.pinning import stack
from fi_patches.pinning.stack import _scope, covering
from fi_patches.pinning.targets import PinnedRunner

logger = get_logger(__name__)

# Per runner class: (problem, dtypes, pin) -> whether the stock list offers the pin.
_offered: weakref.WeakKeyDictionary[type, dict[tuple[Any, ...], bool]] = weakref.WeakKeyDictionary()


def _dtype_key(inputs: Sequence[Any]) -> tuple[Any, ...]:
    out_dtype = getattr(inputs[5], "dtype", None) if len(inputs) > 5 else None
    return (inputs[0].dtype, inputs[1].dtype, out_dtype, len(inputs))


def valid_tactics_replacement(target: PinnedRunner) -> Any:
    """``make(original, gate)`` for the runner class's ``get_valid_tactics``."""
    section, weight_inputs, problem_of = target.section, target.weight_inputs, target.problem

    def make(original: Any, gate: Any) -> Any:
        def stock(self: Any, inputs: Any, profile: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
            if args or kwargs:
                return original(self, inputs, profile, *args, **kwargs)
            return original(self, inputs, profile)

        @functools.wraps(original)
        def get_valid_tactics(
            self: Any, inputs: Any, profile: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            scope = _scope.get()
            index = scope.with_process() if stack._process_tables else scope.index
            shapes = index.get(section) if index is not None else None
            if shapes is None or not gate.active:
                if args or kwargs:
                    return original(self, inputs, profile, *args, **kwargs)
                return original(self, inputs, profile)
            try:
                form = weight_inputs.get(len(inputs))
                if form is None:
                    return stock(self, inputs, profile, args, kwargs)
                weight = inputs[form[0]].shape
                group = (shapes.by_kn if form[1] else shapes.by_nk).get(weight)
                if group is None:  # most calls: an unpinned weight, answered inline
                    if args or kwargs:
                        return original(self, inputs, profile, *args, **kwargs)
                    return original(self, inputs, profile)
                problem = problem_of(inputs, None)
                entry = covering(group, problem[2]) if problem is not None else None
            except Exception:
                log_once(
                    logger,
                    30,
                    f"problem:{target.class_name}",
                    "fi_patches could not read the problem of %s inputs; offering the stock "
                    "tactics",
                    target.class_name,
                    exc_info=True,
                )
                return stock(self, inputs, profile, args, kwargs)
            if entry is None or problem is None:
                return stock(self, inputs, profile, args, kwargs)
            return _offer(target, entry, problem, original, self, inputs, (profile, *args), kwargs)

        return get_valid_tactics

    return make


def _offer(
    target: PinnedRunner,
    entry: Any,
    problem: tuple[int, int, int],
    original: Any,
    runner: Any,
    inputs: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> list[Any]:
    """``[pin]`` when the runner's stock list offers it for this problem (checked once per
    runner class and problem), else the stock list and a warning; ``[]`` from a silenced
    runner."""
    if target.silenced:
        return []
    pin = entry.tactic
    key = (problem, _dtype_key(inputs), pin)
    verdicts = _offered.get(type(runner))
    if verdicts is None:
        verdicts = _offered.setdefault(type(runner), {})
    offered = verdicts.get(key)
    if offered is None:
        stock = original(runner, inputs, *args, **kwargs)
        offered = pin in [target.normalize(t) for t in stock]
        verdicts[key] = offered
        if not offered:
            log_once(
                logger,
                30,
                f"notoffered:{target.class_name}:{key}",
                "pinned tactic %s ([[%s]] #%d) is not among the %d tactics FlashInfer's %s "
                "offers for n=%d k=%d rows=%d; offering the stock tactics",
                pin,
                target.section,
                entry.index,
                len(stock),
                target.class_name,
                *problem,
            )
            return list(stock)
    if not offered:
        return original(runner, inputs, *args, **kwargs)  # type: ignore[no-any-return]
    return [pin]
