"""Which pin serves a call of a tuned op: the one decision every wrapper of the engine asks for.

Of the entries matching the call whose runner is among the call's runners, whose extras are
that runner's own, and whose tactic that runner's own stock list offers for the call, the first
serves: innermost table first; within a table, the runner first in the call's order (as
FlashInfer's own cache lookup picks among runners tuned apart for one key, such as one op
called with two backends), then the file's order. An entry failing any of these serves nothing
(one error when its tactic is not offered), so the key goes to FlashInfer's tuner over the
stock lists of all its runners unless another entry serves it.

Whether a runner offers a pin is asked once per runner class, call key and pin: FlashInfer's
own ``get_valid_tactics``, past fi_patches' wrapper, answers it.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.internals import tuner as fi_tuner
from fi_patches.patching import stock_method
from fi_patches.pinning.index import PinIndex, key_hits, section_hit
from fi_patches.pins.keys import as_tactic, extras_text

logger = get_logger(__name__)

Found = tuple[Any, Any, tuple[Any, ...]]
"""``(entry, tactic, key)``: an entry that pins a call, its tactic in the runner's form, and
the call's key for the once-per-call verdicts."""

Serving = tuple[int, Any, Any, tuple[Any, ...]]
"""``(position of the runner in the call's list, entry, tactic, key)``."""

_verdicts: weakref.WeakKeyDictionary[type, dict[tuple[Any, ...], bool]] = (
    weakref.WeakKeyDictionary()
)
"""Per runner class: ``(key, pin)`` -> whether its stock list offers the pin."""


def forget_verdicts() -> None:
    """Forget whether runners offer their pins (asked again on the next call)."""
    _verdicts.clear()


def signature(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """What a decision about a call depends on of its inputs: each tensor's shape and dtype,
    any other input itself (the key a wrapper remembers its decision under)."""
    return tuple(
        [x if (shape := getattr(x, "shape", None)) is None else (shape, x.dtype) for x in inputs]
    )


def dtypes(inputs: Sequence[Any] | None) -> tuple[Any, ...]:
    """The inputs' dtypes (None for a non-tensor): with the shapes, what decides a runner's
    stock list."""
    return () if inputs is None else tuple(getattr(x, "dtype", None) for x in inputs)


def stock_tactics(runner: Any, inputs: Any, profile: Any) -> Sequence[Any]:
    """``runner``'s tactics for the call as FlashInfer lists them, past fi_patches' wrapper."""
    method = stock_method(type(runner), fi_tuner.RUNNER_VALID_TACTICS.name)
    return method(runner, inputs, profile)  # type: ignore[no-any-return]


def offers(runner: Any, found: Found, listing: Callable[[], Sequence[Any]]) -> bool:
    """Whether ``runner``'s stock list for the call, ``listing()``, offers the pin of
    ``found``: asked once per runner class, call key and pin (a key names one bucket, as
    FlashInfer's cache does), with one error naming the entry when it does not (that key then
    gets the stock tactics)."""
    entry, pin, key = found
    known = _verdicts.get(type(runner))
    offered = None if known is None else known.get((key, pin))
    if offered is not None:
        return offered
    stock = listing()
    offered = pin in [as_tactic(t) for t in stock]
    _verdicts.setdefault(type(runner), {})[(key, pin)] = offered
    if not offered:
        name = type(runner).__name__
        log_once(
            logger,
            logging.ERROR,
            f"notoffered:{name}:{key}:{pin}",
            "pinned tactic %s (%s) is not among the %d tactics FlashInfer's %s offers for "
            "this call (%s); this key gets the stock tactics",
            pin,
            f"[[{entry.SECTION}]] #{entry.index}",
            len(stock),
            name,
            call_text(key),
        )
    return offered


def call_text(key: tuple[Any, ...]) -> str:
    """A call key as a message names it."""
    if key[0] == "pin":
        return f"rows {key[2]}" if isinstance(key[2], int) else f"profile {key[2]}"
    n, k, rows = key[1]
    return f"n={n} k={k} rows={rows}"


def candidates(
    index: PinIndex,
    op: str,
    runners: Sequence[Any],
    inputs: Sequence[Any] | None,
    shapes: Any,
    profile_of: Callable[[], Any],
) -> list[tuple[tuple[int, int, int], Found]]:
    """Every entry that pins this call for one of ``runners``, as ``((table, position, order),
    found)`` in the order they are tried (see the module docstring). ``shapes`` are the call's
    (un-bucketed) input shapes, and ``profile_of()`` their key profile in FlashInfer's buckets;
    ``inputs`` None (a lookup without tensors) leaves extras unchecked."""
    found: list[tuple[tuple[int, int, int], Found]] = []
    profile: list[Any] = []
    for position, runner in enumerate(runners):
        pins = index.classes.get(type(runner).__name__)
        if pins is None:
            continue
        for spec in pins.specs:
            if spec.ops is not None and op not in spec.ops:
                continue
            hit = section_hit(index, spec, runner, inputs, shapes)
            if hit is not None:
                entry, tactic, problem = hit
                section_key: tuple[Any, ...] = (spec.section, problem, dtypes(inputs))
                found.append((_order(index, entry, position), (entry, tactic, section_key)))
        if pins.groups:
            if not profile:
                profile.append(profile_of())

            def extras(r: Any = runner) -> str | None:
                return None if inputs is None else extras_text(r.get_cache_key_extras(list(inputs)))

            for pin in key_hits(pins.groups, op, profile[0], extras):
                pin_key: tuple[Any, ...] = ("pin", pin.token, profile[0], dtypes(inputs))
                found.append((_order(index, pin, position), (pin, pin.tactic, pin_key)))
    found.sort(key=lambda item: item[0])
    return found


def _order(index: PinIndex, entry: Any, position: int) -> tuple[int, int, int]:
    table, order = index.rank[id(entry)]
    return table, position, order


Listing = Callable[[Any], Sequence[Any]]
"""``list_of(runner)``: a runner's stock list for the call."""


def serving_pin(
    index: PinIndex,
    op: str,
    runners: Sequence[Any],
    inputs: Sequence[Any] | None,
    shapes: Any,
    tuner: Any,
    config: Any,
    list_of: Listing | None,
) -> Serving | None:
    """The pin that serves a call of ``op`` over ``runners`` on inputs of ``shapes`` (see the
    module docstring), or None. ``list_of`` asks a runner's stock list; without it (a lookup
    made without tensors) no pin serves, as none can be checked."""
    if list_of is None:
        return None

    def profile_of() -> Any:
        return fi_tuner.nearest_profile(tuner, shapes, config)

    for (_, position, _), found in candidates(index, op, runners, inputs, shapes, profile_of):
        runner = runners[position]
        if offers(runner, found, functools.partial(list_of, runner)):
            return (position, *found)
    return None
