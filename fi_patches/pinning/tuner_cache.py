"""``AutoTuner.search_cache`` for pinned keys, of any op.

* Serving (a lookup outside tuning, made on every call of a tuned op), a key that an entry in
  force serves (:mod:`fi_patches.pinning.serving`: its runner is among the lookup's and offers
  its tactic) is answered with its pin, in every mode (process-wide pins, narrowing and preseed
  blocks), without FlashInfer's own lookup: the pin is what runs, and a cached winner that is
  not the pin is never served under it. The decision is remembered per index under what
  FlashInfer passes (op and input shapes, the runners and the inputs' kinds verified), so a
  repeated call costs one read of the pin state and one dict lookup; a key no entry could pin
  is passed straight through, told where it can be from one input's shape alone (the op's
  reach test, :func:`_learn`), without the memo's key. A runner's own per-call check
  (``validate_tactic``) still vets the pin: one it rejects leaves the call to FlashInfer.
* A key a ``mode="preseed"`` block's entry serves is answered with its pin while tuning too:
  tuning it profiles nothing, and nothing is written into FlashInfer's cache, so leaving the
  block (in any order, from any thread) leaves the cache as it was.
* While tuning, a winner cached for a pinned key that is not the pin (tuned before the block,
  or by another of the op's runners) is a miss, so the tuner profiles the key again over the
  pin alone; the pinned runner's own entry is looked up first.
* Everything else gets FlashInfer's answer unchanged. fi_patches' own work runs under one
  guard: on any surprise the result is FlashInfer's, and the surprise is logged once.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import types
import weakref
from collections.abc import Callable
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.internals import tuner as fi_tuner
from fi_patches.pinning.index import PRESEED, UNSERVED, key_hits, reach_test, section_weights
from fi_patches.pinning.serving import CALL, Listing, serving_pin, stock_tactics
from fi_patches.pinning.stack import CONTEXT, PLAIN, SERVING, current_index, scope
from fi_patches.pins.keys import as_tactic
from fi_patches.pins.table import REFRESHED

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


Row = tuple[Any, tuple[Any, ...], Any, bool]
"""A serving lookup decided: ``(runners held weakly, the inputs' kinds, answer, check)``. The
answer is FlashInfer's cache-hit tuple for the pin, or None for FlashInfer's own answer;
``check``: the pinned runner validates tactics per call (FlashInfer's ``validate_tactic``).
:data:`UNREACHED` where no entry could pin the op at those shapes, whatever the runners and
inputs (the common unpinned key: nothing to verify)."""

UNREACHED: Row = (None, (), None, False)


def _kinds(inputs: Any) -> tuple[Any, ...]:
    """What a decision depends on of the inputs beside their shapes: each tensor's dtype, any
    other input itself."""
    return tuple([getattr(x, "dtype", x) for x in inputs])


def _same(row: Row, runners: Any, inputs: Any) -> bool:
    """Whether ``row`` was decided for these very runners (an id outlives its object) and
    inputs of these kinds."""
    refs = row[0]
    if len(refs) != len(runners):
        return False
    for ref, runner in zip(refs, runners):  # noqa: B905 (lengths checked)
        if ref() is not runner:
            return False
    try:
        return bool(row[1] == _kinds(inputs))
    except Exception:  # an input whose comparison raises: decided afresh
        return False


def _reached(index: Any, op: Any, shapes: Any, profile: Callable[[], Any]) -> bool:
    """Whether any entry of ``index`` could pin a call of ``op`` at ``shapes``, for any runner
    and inputs of any kind (a section's weight shape, a ``[[pin]]``'s key without its
    extras): where none could, the lookup needs no verifying. ``profile()`` is the call's key
    profile (read only where ``[[pin]]`` keys need it)."""
    for at, by_shape in section_weights(index, op, len(shapes)):
        if by_shape.get(tuple(shapes[at])):
            return True
    groups = [group for pins in index.classes.values() for group in pins.groups]
    if not groups:
        return False
    return bool(key_hits(groups, op, profile(), None))


def _decide(
    tuner: Any, index: Any, op: Any, runners: Any, shapes: Any, config: Any, inputs: Any
) -> Row | None:
    """Decide a serving lookup (:func:`serving_pin`) and remember it in the index under what
    FlashInfer passes; None (not remembered) for an op no pin here serves."""
    if op not in index.served:
        return None
    # FlashInfer's key profile of the call, read at most once for both of its readers below.
    profile = functools.cache(functools.partial(fi_tuner.nearest_profile, tuner, shapes, config))
    _learn(index, op, shapes, config, profile)
    if not _reached(index, op, shapes, profile):
        row = UNREACHED
    else:
        listed = tuple(runners)
        pinned = serving_pin(
            index, op, listed, inputs, shapes, tuner, config, _listing(tuner, inputs, None)
        )
        if pinned is None:
            answer, check = None, False
        else:
            position, _, tactic, _ = pinned
            answer = (True, position, tactic, None)
            check = callable(getattr(type(listed[position]), "validate_tactic", None))
        try:
            refs = tuple([weakref.ref(runner) for runner in listed])
        except TypeError:  # a runner that takes no weak reference: decided afresh each time
            return ((), (), answer, check)
        row = (refs, _kinds(inputs), answer, check)
    with contextlib.suppress(TypeError):  # shapes that do not hash: decided afresh each time
        index.lookups.remember((op, shapes), row)
    return row


def _learn(index: Any, op: Any, shapes: Any, config: Any, profile: Callable[[], Any]) -> None:
    """Learn, for later serving lookups of ``op`` under ``config``, the one-input test
    (:func:`~fi_patches.pinning.index.reach_test`) that spares a key no entry could pin the
    memo's key (hashing every input's shape), unless known already. The test reads an input's
    shape as the call has it where FlashInfer's profile keeps that input's shape; a call whose
    profile (``profile()``) does not keep it leaves the op to the memo (and says so once)."""
    length = len(shapes)
    known = index.reach.get(op)
    if known is not None and known[0] is config and known[1] == length:
        return
    index.reach.pop(op, None)
    shaped = fi_tuner.shaped_inputs(config, length)
    test = None if shaped is None else reach_test(index, op, length, shaped)
    if test is None:
        return
    position = test[0]
    try:
        kept = profile()[position]
        as_called = tuple(int(d) for d in shapes[position])
    except Exception:  # shapes FlashInfer's profile does not take: no test learned
        return
    if kept != as_called:
        log_once(
            logger,
            logging.INFO,
            f"reach:{op}",
            "fi_patches: FlashInfer's profile of a call of op %s changes input %d's shape, which "
            "the op's reach test would read as called; its serving lookups read the memo",
            op,
            position,
        )
        return
    index.reach.remember(op, (config, length, position, test[1]))


def _served(
    tuner: Any,
    index: Any,
    row: Row | None,
    op: Any,
    runners: Any,
    shapes: Any,
    config: Any,
    inputs: Any,
) -> Any:
    """The answer to a serving lookup (``choose_one`` outside tuning) in ``index``, given the
    row remembered for ``(op, shapes)`` if any: the pin that serves it as a cache hit, else
    None for FlashInfer's own answer."""
    if row is None or (row[0] is not None and not _same(row, runners, inputs)):
        row = _decide(tuner, index, op, runners, shapes, config, inputs)
        if row is None:
            return None
    answer = row[2]
    if answer is not None and row[3] and not _valid(runners[answer[1]], inputs, answer[2], op):
        return None
    return answer


def _valid(runner: Any, inputs: Any, tactic: Any, op: Any) -> bool:
    """FlashInfer's per-call check of a tactic (``validate_tactic``) on these inputs: a pin it
    rejects leaves the lookup to FlashInfer, as a cached winner it rejects would."""
    try:
        ok = bool(runner.validate_tactic(inputs, tactic))
    except Exception:
        ok = False
    if not ok:
        log_once(
            logger,
            logging.INFO,
            f"invalid:{op}:{type(runner).__name__}:{tactic}",
            "fi_patches: %s's validate_tactic rejects the pin %s of op %s for a call; "
            "FlashInfer answers that call",
            type(runner).__name__,
            tactic,
            op,
        )
    return ok


def _tuning(
    tuner: Any,
    index: Any,
    op: Any,
    runners: Any,
    shapes: Any,
    config: Any,
    inputs: Any,
    profile: Any,
) -> Any:
    """The pin serving a lookup while tuning (:func:`serving_pin`), decided every time."""
    call = CALL.get()
    if call is not None and call.op == op:
        call.config = config  # the config FlashInfer applied its overrides to
    return serving_pin(
        index, op, runners, inputs, shapes, tuner, config, _listing(tuner, inputs, profile, shapes)
    )


_UNSET: Any = object()
"""A keyword argument the caller did not pass."""

KEYWORDS = ("require_profiling_policy", "validation_profile")
"""The keyword-only parameters of FlashInfer's ``search_cache`` (0.7.4) that the lean wrapper
takes by name."""


def _lean_signature(original: Any) -> bool:
    """Whether ``original`` takes FlashInfer's five parameters under their own names, then at
    most the keyword-only parameters of :data:`KEYWORDS`, and nothing else: a wrapper taking
    exactly those is called as cheaply as Python calls anything (no ``**kwargs`` dict)."""
    code = getattr(original, "__code__", None)
    if not isinstance(original, types.FunctionType) or code is None:
        return False
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS) or code.co_posonlyargcount:
        return False
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return names[1 : code.co_argcount] == (
        "custom_op",
        "runners",
        "input_shapes",
        "tuning_config",
        "inputs",
    ) and set(names[code.co_argcount :]) <= set(KEYWORDS)


def search_cache_replacement(original: Any, gate: Any) -> Any:
    """``AutoTuner.search_cache`` as the module docstring says, taking FlashInfer's own
    parameters. Every lookup first finds the pins in force here in one read of the pin state
    (:data:`fi_patches.pinning.stack.SERVING`) and, while some block is open somewhere, one of
    the context (:data:`fi_patches.pinning.stack.scope`); with none it calls FlashInfer's own
    method straight away. A serving lookup (on every call of a tuned op) of an op no entry pins
    then goes straight to FlashInfer; of a pinned op, a key its reach test rules out goes
    straight to FlashInfer too, and any other reads the index's memo once: a key no entry
    reaches goes straight to FlashInfer, a pinned key is answered from the pin without
    FlashInfer's own lookup; everything else goes the general way (:func:`_general`)."""

    def lean(
        self: Any,
        custom_op: Any,
        runners: Any,
        input_shapes: Any,
        tuning_config: Any,
        inputs: Any = None,
        *,
        require_profiling_policy: Any = _UNSET,
        validation_profile: Any = _UNSET,
    ) -> Any:
        # The pin state is read as module globals, not closure cells: on Python 3.11 cells cost
        # every lookup 0.01-0.02 of stock more (an A/B in docs/results.md).
        index = SERVING[0]
        if index is CONTEXT:  # some block is open somewhere: this context decides
            try:
                index = scope().index if PLAIN[0] else current_index()
            except Exception:
                _surprise()
                index = None
        if require_profiling_policy is _UNSET and validation_profile is _UNSET:
            if index is None:  # nothing pins here
                return original(self, custom_op, runners, input_shapes, tuning_config, inputs)
            if inputs is not None and not self.is_tuning_mode:  # a serving lookup
                try:
                    # An op no entry here pins goes straight to FlashInfer (the common call,
                    # spared the memo's key: hashing the input shapes), and so does a key of a
                    # pinned op that one input's shape tells no entry could pin (the reach
                    # test); else the memo: a key no entry reaches goes to FlashInfer, a pinned
                    # key is answered from its pin. One read of the op's reach tells both.
                    reach = index.reach[custom_op]
                    if reach is not UNSERVED:
                        config, length, at, shapes = reach
                        if (
                            config is not tuning_config
                            or length != len(input_shapes)
                            or input_shapes[at] in shapes
                        ):  # some entry may pin this key (the memo, of this refresh, decides)
                            if index.at != REFRESHED[0]:
                                index.fresh()
                            row = index.lookups.get((custom_op, input_shapes))
                            if row is not UNREACHED and gate.active:
                                answer = _served(
                                    self,
                                    index,
                                    row,
                                    custom_op,
                                    runners,
                                    input_shapes,
                                    tuning_config,
                                    inputs,
                                )
                                if answer is not None:
                                    return answer
                except Exception:
                    _surprise()
                return original(self, custom_op, runners, input_shapes, tuning_config, inputs)
            return _general(
                self, original, gate, custom_op, runners, input_shapes, tuning_config, inputs, {}
            )
        kwargs = {}
        if require_profiling_policy is not _UNSET:
            kwargs["require_profiling_policy"] = require_profiling_policy
        if validation_profile is not _UNSET:
            kwargs["validation_profile"] = validation_profile
        if index is None:
            return original(self, custom_op, runners, input_shapes, tuning_config, inputs, **kwargs)
        return _general(
            self, original, gate, custom_op, runners, input_shapes, tuning_config, inputs, kwargs
        )

    if _lean_signature(original):
        return functools.wraps(original)(lean)

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
        if kwargs:
            return _general(
                self,
                original,
                gate,
                custom_op,
                runners,
                input_shapes,
                tuning_config,
                inputs,
                kwargs,
            )
        return lean(self, custom_op, runners, input_shapes, tuning_config, inputs)

    return search_cache


def _general(
    tuner: Any,
    original: Any,
    gate: Any,
    op: Any,
    runners: Any,
    shapes: Any,
    config: Any,
    inputs: Any,
    kwargs: dict[str, Any],
) -> Any:
    """A lookup while tuning, or one passing further arguments: a pinned key is answered with
    its pin where a preseed block's entry serves it or the lookup serves (outside tuning),
    else FlashInfer's answer is checked against the pin (:func:`_checked`)."""
    try:
        index = current_index() if gate.active else None
        pinned = None
        if index is not None and op in index.served:
            profile = kwargs.get("validation_profile")
            if profile is None and not fi_tuner.is_tuning(tuner):
                answer = None
                if inputs is not None:
                    try:
                        row = index.fresh().lookups.get((op, shapes))
                    except TypeError:  # shapes that do not hash: decided afresh
                        row = None
                    answer = _served(tuner, index, row, op, runners, shapes, config, inputs)
                if answer is not None:
                    return answer
            else:
                pinned = _tuning(tuner, index, op, runners, shapes, config, inputs, profile)
    except Exception:
        _surprise()
        pinned = None
    if pinned is None:
        return original(tuner, op, runners, shapes, config, inputs, **kwargs)
    position, entry, tactic, _ = pinned
    if index is not None and index.modes.get(id(entry)) == PRESEED:
        return (True, position, tactic, None)
    result = original(tuner, op, runners, shapes, config, inputs, **kwargs)
    try:
        call = (runners, shapes, config, inputs, kwargs)
        return _checked(tuner, result, position, tactic, op, call, original)
    except Exception:
        _surprise()
        return result


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
