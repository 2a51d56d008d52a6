"""``get_valid_tactics`` of a pinned runner class: for a pinned problem it offers only the pin
(checked once against the stock list), for every other problem the stock list.

``forward`` keeps validating against the stock list, so a tactic tuned earlier still runs.
Any surprise falls back to FlashInfer's own answer and is logged once.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.pinning import stack
from fi_patches.pinning.stack import _scope, covering
from fi_patches.pinning.targets import PinnedRunner

logger = get_logger(__name__)

_SURPRISE = "fi_patches could not compare a pin with the runner's tactics; offering the stock list"

# Per runner class: (problem, dtypes, pin) -> whether the stock list offers the pin.
_offered: weakref.WeakKeyDictionary[type, dict[tuple[Any, ...], bool]] = weakref.WeakKeyDictionary()


def _dtype_key(inputs: Sequence[Any]) -> tuple[Any, ...]:
    out_dtype = getattr(inputs[5], "dtype", None) if len(inputs) > 5 else None
    return (inputs[0].dtype, inputs[1].dtype, out_dtype, len(inputs))


def _takes_inputs_and_profile_only(function: Any) -> bool:
    """Whether ``function``'s parameters are exactly ``(self, inputs, profile)``."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    return [p.name for p in params] == ["self", "inputs", "profile"] and all(
        p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params
    )


def valid_tactics_replacement(target: PinnedRunner) -> Any:
    """``make(original, gate)`` for the runner class's ``get_valid_tactics``.

    Most calls are for a weight without pins, so the wrapper answers those inline: one
    context-variable read, two dict lookups and the weight's ``shape``, all of fi_patches' own
    work under one guard (FlashInfer's own call is made outside it, so its behaviour, exceptions
    included, is unchanged). Where the original takes exactly ``(self, inputs, profile)``
    (FlashInfer 0.7.x), so does the wrapper, which saves packing ``*args, **kwargs`` on every
    call; otherwise it passes any extra arguments on.
    """
    section, weight_inputs, problem_of = target.section, target.weight_inputs, target.problem
    scope_of = _scope.get

    def make(original: Any, gate: Any) -> Any:
        def stock(self: Any, inputs: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
            return original(self, inputs, *args, **kwargs)

        def unreadable() -> None:
            log_once(
                logger,
                logging.WARNING,
                f"problem:{target.class_name}",
                "fi_patches could not read the problem of %s inputs; offering the stock tactics",
                target.class_name,
                exc_info=True,
            )

        def pinned(self: Any, inputs: Any, group: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
            """The answer for a weight with pins here: its covering pin, else the stock list."""
            try:
                problem = problem_of(inputs, None)
                entry = covering(group, problem[2]) if problem is not None else None
            except Exception:
                unreadable()
                return stock(self, inputs, args, kwargs)
            if entry is None or problem is None:
                return stock(self, inputs, args, kwargs)
            return _offer(target, entry, problem, original, self, inputs, args, kwargs)

        # The two wrappers share their body; it is written out in each, as a call per
        # get_valid_tactics would cost as much as the lookup itself.
        if _takes_inputs_and_profile_only(original):

            @functools.wraps(original)
            def get_valid_tactics_exact(self: Any, inputs: Any, profile: Any = None) -> Any:
                try:  # everything of fi_patches' own, attribute reads included
                    scope = scope_of()
                    index = scope.with_process() if stack._process_tables else scope.index
                    group = None
                    if index is not None:
                        shapes = index.get(section)
                        if shapes is not None:
                            form = weight_inputs.get(len(inputs))
                            if form is not None:
                                by = shapes.by_kn if form[1] else shapes.by_nk
                                group = by.get(inputs[form[0]].shape)
                    pin_here = group is not None and gate.active
                except Exception:
                    unreadable()
                    pin_here = False
                if pin_here:
                    return pinned(self, inputs, group, (profile,), {})
                return original(self, inputs, profile)

            return get_valid_tactics_exact

        @functools.wraps(original)
        def get_valid_tactics(
            self: Any, inputs: Any, profile: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            try:  # everything of fi_patches' own, attribute reads included
                scope = scope_of()
                index = scope.with_process() if stack._process_tables else scope.index
                group = None
                if index is not None:
                    shapes = index.get(section)
                    if shapes is not None:
                        form = weight_inputs.get(len(inputs))
                        if form is not None:
                            by = shapes.by_kn if form[1] else shapes.by_nk
                            group = by.get(inputs[form[0]].shape)
                pin_here = group is not None and gate.active
            except Exception:
                unreadable()
                pin_here = False
            if pin_here:
                return pinned(self, inputs, group, (profile, *args), kwargs)
            return original(self, inputs, profile, *args, **kwargs)

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
    try:
        key = (problem, _dtype_key(inputs), pin)
        verdicts = _offered.get(type(runner))
        if verdicts is None:
            verdicts = _offered.setdefault(type(runner), {})
        offered = verdicts.get(key)
    except Exception:
        log_once(logger, logging.WARNING, f"offer:{target.class_name}", _SURPRISE, exc_info=True)
        return original(runner, inputs, *args, **kwargs)  # type: ignore[no-any-return]
    if offered is None:
        stock = original(runner, inputs, *args, **kwargs)
        try:
            offered = pin in [target.normalize(t) for t in stock]
        except Exception:
            log_once(
                logger, logging.WARNING, f"offer:{target.class_name}", _SURPRISE, exc_info=True
            )
            return list(stock)
        verdicts[key] = offered
        if not offered:
            log_once(
                logger,
                logging.WARNING,
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
