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

While tuning, FlashInfer's ``choose_one`` is followed (:class:`Call`): the op being tuned, its
effective tuning config and what each of its runners may profile, noted for the other wrappers;
and the profiling call times nothing a pinned key was not offered (``autotune_v2`` races the
default tactic beside the runners' lists: for a pinned key it is not timed). Outside tuning the
``choose_one`` wrapper is not installed at all (:mod:`fi_patches.pinning.installation` installs
it while the tuner's flag is set), and FlashInfer makes no profiling call.

A runner is asked which tactics it offers for an MXFP8 problem with inputs shaped as
``mm_mxfp8`` hands them over (:func:`mxfp8_runner_inputs`): only the activation is a real
tensor, on the CUDA device when there is one (the cute-dsl runner reads that device's SM count),
and it holds one row; the rest are ``meta`` tensors, so checking a large problem allocates next
to nothing.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.internals import tuner as fi_tuner
from fi_patches.patching import stock_method
from fi_patches.pinning.index import PinIndex, key_hits, section_hit
from fi_patches.pins.keys import as_tactic, extras_text
from fi_patches.pins.table import REFRESHED, WeakCache

logger = get_logger(__name__)

Found = tuple[Any, Any, tuple[Any, ...]]
"""``(entry, tactic, key)``: an entry that pins a call, its tactic in the runner's form, and
the call's key for the once-per-call verdicts."""

Serving = tuple[int, Any, Any, tuple[Any, ...]]
"""``(position of the runner in the call's list, entry, tactic, key)``."""

_verdicts: WeakCache[type, dict[tuple[Any, ...], bool]] = WeakCache(REFRESHED)
"""Per runner class: ``(key, pin)`` -> whether its stock list offers the pin (asked again after
``fi_patches.refresh()``)."""


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
    verdicts = _verdicts.fresh()
    known = verdicts.get(type(runner))
    offered = None if known is None else known.get((key, pin))
    if offered is not None:
        return offered
    stock = listing()
    offered = pin in [as_tactic(t) for t in stock]
    verdicts.setdefault(type(runner), {})[(key, pin)] = offered
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


@dataclass
class Call:
    """One ``choose_one`` call being tuned."""

    op: str
    config: Any
    """The tuning config in effect (the tuner-cache wrapper updates it to the one FlashInfer
    applied its overrides to)."""
    tuner: Any
    runners: tuple[Any, ...] = ()
    """The runners FlashInfer chooses among, in its order."""
    allowed: dict[tuple[int, str], tuple[Any, ...]] = field(default_factory=dict)
    """``(id(profile inputs), runner class) -> tactics it may profile``, for pinned keys."""
    decided: dict[int, Any] = field(default_factory=dict)
    """``id(profile inputs)`` -> the pin serving them (None: none), decided once for all the
    runners FlashInfer asks to list their tactics for those inputs."""
    held: list[Any] = field(default_factory=list)
    """The profile inputs named by ``allowed`` and ``decided`` (their ids stay theirs during
    the call)."""

    def allow(self, inputs: Any, runner: str, tactics: tuple[Any, ...]) -> None:
        self.allowed[(id(inputs), runner)] = tactics
        self.held.append(inputs)

    def lists(self, runner: Any) -> bool:
        """Whether ``runner`` is one this call chooses among (not one a runner delegates to)."""
        return any(r is runner for r in self.runners)

    def serving(self, inputs: Any, decide: Callable[[], Any]) -> Any:
        """The pin serving a call on ``inputs``: ``decide()`` on the first runner's asking."""
        key = id(inputs)
        if key not in self.decided:
            self.decided[key] = decide()
            self.held.append(inputs)
        return self.decided[key]


CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("fi_patches_call", default=None)

TUNING = [0]
"""How many ``choose_one`` calls are being tuned now, in any thread (the runner wrappers' fast
path reads it before the context variable)."""


def choose_one_replacement(wrap_runners: Callable[[Any], None]) -> Any:
    """``make(original, gate)`` for ``AutoTuner.choose_one``: while tuning, note the call and
    hand its runners to ``wrap_runners`` (so an unpinned runner of a pinned op is wrapped too)."""

    def make(original: Any, gate: Any) -> Any:
        @functools.wraps(original)
        def choose_one(
            self: Any, custom_op: Any, runners: Any, tuning_config: Any, inputs: Any, **kwargs: Any
        ) -> Any:
            if not self.is_tuning_mode or not gate.active:  # tuning just ended, or reverted
                if kwargs:
                    return original(self, custom_op, runners, tuning_config, inputs, **kwargs)
                return original(self, custom_op, runners, tuning_config, inputs)
            try:
                wrap_runners(runners)
                token = CALL.set(Call(str(custom_op), tuning_config, self, tuple(runners)))
            except Exception:
                log_once(
                    logger,
                    logging.WARNING,
                    "choose_one",
                    "fi_patches could not follow a tuning call; FlashInfer tunes it unpinned",
                    exc_info=True,
                )
                return original(self, custom_op, runners, tuning_config, inputs, **kwargs)
            TUNING[0] += 1
            try:
                return original(self, custom_op, runners, tuning_config, inputs, **kwargs)
            finally:
                TUNING[0] -= 1
                CALL.reset(token)

        return choose_one

    return make


NOT_TIMED = float("inf")
"""What the tuner reads for a candidate fi_patches did not time (FlashInfer's own mark of a
tactic that failed to profile)."""


def profile_replacement(original: Any, gate: Any) -> Any:
    """``AutoTuner._profile_single_kernel`` that times only what a pinned key was offered."""

    @functools.wraps(original)
    def profile_single_kernel(
        self: Any, runner: Any, inputs: Any, tactic: Any, *args: Any, **kwargs: Any
    ) -> Any:
        call = CALL.get()
        if call is not None and call.allowed and gate.active:
            try:
                allowed = call.allowed.get((id(inputs), type(runner).__name__))
                skip = allowed is not None and as_tactic(tactic) not in allowed
            except Exception:
                skip = False
            if skip:
                logger.debug(
                    "tuning %s: %s tactic %s is not the pinned key's; not timed",
                    call.op,
                    type(runner).__name__,
                    tactic,
                )
                return NOT_TIMED
        return original(self, runner, inputs, tactic, *args, **kwargs)

    return profile_single_kernel


def round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def mxfp8_runner_inputs(
    n: int, k: int, rows: int, out_dtype: Any = None, workspace_bytes: int = 1
) -> list[Any]:
    """``[a, b, a_scale, b_scale, out_dtype, out, workspace]`` for an MXFP8 GEMM of ``rows``
    activation rows and an ``(n, k)`` weight (``b`` is its column-major ``(k, n)`` view). The
    tuner's cache key holds the workspace size: pass ``mm_mxfp8``'s to build its keys."""
    import torch

    out_dtype = out_dtype or torch.bfloat16
    device = (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    )
    # One real row seen as ``rows`` (stride 0): runners read its shape and device, and a
    # large bucket must not allocate rows x K bytes on a serving GPU.
    a = torch.empty(1, k, dtype=torch.float8_e4m3fn, device=device).expand(rows, k)
    meta = torch.device("meta")
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device=meta).t()
    sf_k = round_up(k // 32, 4)
    a_scale = torch.empty(round_up(rows, 128) * sf_k, dtype=torch.uint8, device=meta)
    b_scale = torch.empty(round_up(n, 128) * sf_k, dtype=torch.uint8, device=meta)
    out = torch.empty(rows, n, dtype=out_dtype, device=meta)
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=meta)
    return [a, b, a_scale, b_scale, out_dtype, out, workspace]
