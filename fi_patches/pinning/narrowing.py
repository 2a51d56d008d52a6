"""The one ``get_valid_tactics`` wrapper of every pinned runner class. While FlashInfer's tuner
lists a call's candidates, the runner that :mod:`fi_patches.pinning.serving` says serves the key
offers only its pin, the op's other runners offer nothing (the tuner then profiles the pin
alone), and every runner offers FlashInfer's list when no pin serves. A direct call (outside
the tuner's candidate listing) is offered the runner's own pin when its stock list holds it.

``forward`` keeps validating against the stock list, so a tactic tuned earlier still runs.
Any surprise falls back to FlashInfer's own answer and is logged once.
"""

from __future__ import annotations

import functools
import inspect
import logging
import types
from collections.abc import Callable, Sequence
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.pinning import stack
from fi_patches.pinning.index import MISS, ClassPins, PinIndex, direct_hit, section_hit
from fi_patches.pinning.serving import (
    CALL,
    TUNING,
    Found,
    dtypes,
    offers,
    serving_pin,
    signature,
    stock_tactics,
)
from fi_patches.pinning.stack import CONTEXT, PLAIN, SERVING, current_index, scope
from fi_patches.pins.keys import extras_text
from fi_patches.pins.table import REFRESHED

logger = get_logger(__name__)


def input_profile(inputs: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
    """The inputs' shapes as FlashInfer's tuner reads them (a non-tensor input is ``(0,)``)."""
    return tuple(tuple(int(d) for d in x.shape) if hasattr(x, "shape") else (0,) for x in inputs)


def direct_pin(
    index: PinIndex, pins: ClassPins, runner: Any, inputs: Sequence[Any]
) -> Found | None:
    """``(entry, tactic, key)`` of ``runner``'s own pin for a direct call on ``inputs`` (their
    shapes as they are), or None."""
    for spec in pins.specs:
        hit = section_hit(index, spec, runner, inputs)
        if hit is not None:
            entry, tactic, problem = hit
            return entry, tactic, (spec.section, problem, dtypes(inputs))
    if pins.groups:

        def extras() -> str:
            return extras_text(runner.get_cache_key_extras(list(inputs)))

        found = direct_hit(pins.groups, inputs, extras)
        if found is not None:
            pin, rows = found
            return pin, pin.tactic, ("pin", pin.token, rows, dtypes(inputs))
    return None


Offer = tuple[Any, ...]
"""What a runner offers a call in place of its stock list: ``(pin,)``, or ``()`` when another
runner serves the key."""


UNREAD: Any = object()
"""What a wrapper hands :func:`search` for the index in force when it has not read it."""


def search(
    name: str,
    gate: Any,
    runner: Any,
    inputs: Sequence[Any],
    profile: Any,
    stock: tuple[Any, tuple[Any, ...], dict[str, Any]],
    index: PinIndex | None = UNREAD,
) -> Offer | None:
    """What a call of runner class ``name`` is offered in this context (see :data:`Offer`), or
    None for the stock list (also once the wrapper's patch is reverted). ``stock`` is
    ``(method, args, kwargs)``: FlashInfer's own method and the call's further arguments, asked
    for the stock list where a pin is checked (once per call key). ``index``: the index in
    force here, where the wrapper has read it already (this context's own while
    :data:`~fi_patches.pinning.stack.PLAIN`), else :data:`UNREAD`."""
    if not gate.active:
        return None
    if index is UNREAD:
        # What stack.current_index() answers, inline where it can be (this runs on every call
        # the probe lets through): SERVING holds the pins in force (the process-wide index, or
        # None) while no block is open anywhere, and its merge is the one current_index() finds.
        index = SERVING[0]
        if index is CONTEXT:
            index = current_index()
    if index is None:  # another context's pin, or none while pins are suspended
        return None
    call = CALL.get()
    if call is not None and call.lists(runner):
        shapes = profile.get_opt_shapes() if profile is not None else input_profile(inputs)
        serving = call.serving(
            inputs,
            lambda: serving_pin(
                index,
                call.op,
                call.runners,
                inputs,
                shapes,
                call.tuner,
                call.config,
                lambda r: stock_tactics(r, inputs, profile),
            ),
        )
        if serving is None:
            return None
        return (serving[2],) if call.runners[serving[0]] is runner else ()
    # A direct call's offer depends on the runner and its inputs' shapes and dtypes (and on any
    # other input itself): remembered per index, so a repeated call reads only those.
    try:
        key = (id(runner), signature(inputs))
        if index.at != REFRESHED[0]:  # inline: this runs on every pinned call
            index.fresh()
        known = index.answers.recall(key, runner)
    except TypeError:  # an input that does not hash: decided afresh
        key, known = None, MISS
    if known is not MISS:
        return known  # type: ignore[no-any-return]
    method, args, kwargs = stock
    offer = _direct(
        index, name, runner, inputs, lambda: method(runner, inputs, profile, *args, **kwargs)
    )
    if key is not None:
        index.answers.keep(key, runner, offer)
    return offer


def _direct(
    index: PinIndex,
    name: str,
    runner: Any,
    inputs: Sequence[Any],
    listing: Callable[[], Sequence[Any]],
) -> Offer | None:
    """What a direct call of runner class ``name`` is offered: its own pin where its stock list
    holds it, nothing where a section that silences it covers the call."""
    pins = index.classes.get(name)
    found = None if pins is None else direct_pin(index, pins, runner, inputs)
    if found is not None:
        return (found[1],) if offers(runner, found, listing) else None
    if any(
        section_hit(index, spec, None, inputs) is not None for spec in index.silenced.get(name, ())
    ):
        return ()
    return None


def valid_tactics_replacement(name: str) -> Any:
    """``make(original, gate)`` for ``get_valid_tactics`` of the runner class ``name``.

    Every call reads its context first (one C call): where nothing pins there, FlashInfer's
    method runs straight away, no tensor's shape read. In a context with pins, most calls find
    no pin: they fail the class's probe (one dict lookup and one tensor's shape in a set, see
    :func:`fi_patches.pinning.stack.probe_cell`) and get the stock list.
    FlashInfer's own method takes ``(self, inputs, profile)``: the wrapper then takes exactly
    those parameters, under the method's own names (a bare positional call is the cheapest
    Python makes), and any other signature gets a wrapper that passes every argument on.
    fi_patches' own work runs under guards that fall back to the stock list; FlashInfer's own
    call is made outside them, so its behaviour, exceptions included, is unchanged."""

    def make(original: Any, gate: Any) -> Any:
        probe_for = stack.probe_cell(name).get

        def answer(
            runner: Any,
            inputs: Any,
            profile: Any,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
            index: Any,
        ) -> list[Any] | None:
            """What a call that may be pinned in this context is offered: the pin, ``[]`` when
            another runner's pin serves it, or None for the stock list. ``index``: as
            :func:`search` takes it."""
            try:
                offer = search(name, gate, runner, inputs, profile, (original, args, kwargs), index)
            except Exception:
                _unreadable(name)
                return None
            if offer is None:
                return None
            if TUNING[0]:
                _note(inputs, name, offer)
            return list(offer)

        shell = _plain_shell if _plain_signature(original) else _general_shell
        return functools.wraps(original)(shell(name, original, probe_for, answer))

    return make


Answer = Callable[[Any, Any, Any, tuple[Any, ...], dict[str, Any], Any], "list[Any] | None"]
"""``answer(runner, inputs, profile, args, kwargs, index)``: what a wrapper offers a call that
may be pinned (None: the stock list); ``index`` as :func:`search` takes it."""


def _plain_shell(name: str, original: Any, probe_for: Any, answer: Answer) -> Any:
    """The wrapper of a ``(self, inputs, profile)`` method: one read of the context first (a
    call where nothing pins goes straight to FlashInfer's method), then the probe inline, then
    ``answer`` for a call that passes it (or any call while tuning)."""

    def get_valid_tactics(self: Any, inputs: Any, profile: Any) -> Any:
        # The context's scope and PLAIN are module globals, not closure cells (as the lookup
        # wrapper reads them, :mod:`fi_patches.pinning.tuner_cache`).
        index = scope().index
        if index is None and PLAIN[0]:  # nothing pins in this context
            return original(self, inputs, profile)
        try:
            probe = probe_for(len(inputs))
            hit = probe is not None and (probe[1] is None or inputs[probe[0]].shape in probe[1])
        except AttributeError:  # not a tensor: no pin has this form
            hit = False
        except Exception:
            _unreadable(name)
            hit = False
        # While tuning, a runner whose own pins miss may still yield to another runner's pin
        # for the call (search tells), so every call searches.
        if hit or TUNING[0]:
            # While PLAIN, this context's own index is the one in force: search need not read
            # the context again.
            found = answer(self, inputs, profile, (), {}, index if PLAIN[0] else UNREAD)
            if found is not None:
                return found
        return original(self, inputs, profile)

    _take_parameter_names(get_valid_tactics, original)
    return get_valid_tactics


def _general_shell(name: str, original: Any, probe_for: Any, answer: Answer) -> Any:
    """The wrapper of a method of any other signature: every call in a context that has pins is
    answered (the probe only saves time) and every argument passed on."""

    def get_valid_tactics(
        self: Any, inputs: Any, profile: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        index = scope().index
        if index is not None or not PLAIN[0]:
            found = answer(self, inputs, profile, args, kwargs, index if PLAIN[0] else UNREAD)
            if found is not None:
                return found
        return original(self, inputs, profile, *args, **kwargs)

    return get_valid_tactics


def _plain_signature(function: Any) -> bool:
    """Whether ``function`` takes exactly three positional parameters, none defaulted
    (``(self, inputs, profile)`` under any names), and nothing else."""
    code = getattr(function, "__code__", None)
    return (
        isinstance(function, types.FunctionType)
        and code is not None
        and code.co_argcount == 3
        and code.co_posonlyargcount == 0
        and code.co_kwonlyargcount == 0
        and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
        and not function.__defaults__
    )


def _take_parameter_names(wrapper: Any, original: Any) -> None:
    """Give ``wrapper``'s three parameters ``original``'s names (FlashInfer spells the last one
    ``profile`` or ``_profile``), so that a call by keyword binds as it would to the original;
    left as they are if a name would clash with one of the wrapper's locals."""
    names = original.__code__.co_varnames[:3]
    rest = wrapper.__code__.co_varnames[3:]
    if not set(names) & set(rest):
        wrapper.__code__ = wrapper.__code__.replace(co_varnames=names + rest)


def _unreadable(name: str) -> None:
    log_once(
        logger,
        logging.WARNING,
        f"problem:{name}",
        "fi_patches could not read the problem of %s inputs; offering the stock tactics",
        name,
        exc_info=True,
    )


def _note(inputs: Any, name: str, tactics: tuple[Any, ...]) -> None:
    """Tell the tuning call what this runner may profile for these inputs."""
    call = CALL.get()
    if call is not None:
        call.allow(inputs, name, tactics)
