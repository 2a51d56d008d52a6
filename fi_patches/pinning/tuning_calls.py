"""FlashInfer's ``choose_one`` while tuning: the op being tuned, its effective tuning config and
what each of its runners may profile, noted for the other wrappers; and the profiling call, which
times nothing a pinned key was not offered (``autotune_v2`` races the default tactic beside the
runners' lists: for a pinned key it is not timed).

Outside tuning both wrappers are a pass-through at the cost of one attribute read.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.pins.keys import as_tactic

logger = get_logger(__name__)


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
            if not self.is_tuning_mode or not gate.active:  # serving: pass straight through
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
