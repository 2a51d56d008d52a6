"""Reference-counted installation of fi_patches' wrappers: the first holder patches, the last
to release restores the exact original objects. An :class:`Installation` is a lifecycle entry
(:data:`fi_patches.startup.LIFECYCLE`): ``instrument()`` acquires a hold, ``uninstrument()``
revokes them all.

A holder gets a :class:`Hold`, and releasing counts only a hold of the current installation:
``fi_patches.disable()`` revokes every hold at once (:meth:`Installation.revoke`), and a block
opened before it that leaves afterwards releases nothing, so it never tears down the wrappers
of a block opened after a later ``enable()``.

The engine's installation (:data:`PINNING`) patches FlashInfer's tuner (``search_cache``,
the profiling call, and ``choose_one`` while the tuner is tuning) and wraps
``get_valid_tactics`` of the runner classes the tables in force name, and of every runner of an
op those tables pin while it is tuned. ``choose_one``'s wrapper acts only while tuning, so it is
installed when ``flashinfer.autotune()`` sets the tuner's tuning flag and removed when it clears
it: a serving call (every call of a tuned op) passes through one wrapper of fi_patches', not two.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.internals import tuner as fi_tuner
from fi_patches.patching import AttributePatch, PatchSet, RunnerMethodPatch, WhileFlagged
from fi_patches.pinning.narrowing import valid_tactics_replacement
from fi_patches.pinning.serving import choose_one_replacement, profile_replacement
from fi_patches.pinning.tuner_cache import search_cache_replacement

logger = get_logger(__name__)

REINSTALLS_WARNED = 100
"""After this many installations of one :class:`Installation` in a process, a warning is logged
once. Each installation and each removal rewrites attributes of FlashInfer's classes (its tuner
and runner classes): CPython then re-specializes the code that uses them (FlashInfer's stock
lookup took about 120 calls to be steady again on Python 3.11), and from Python 3.13
a class that was changed about a thousand times (CPython's limit of version tags per class) is
never specialized again, so FlashInfer's tuner runs slower for the rest of the process. Measured
on Python 3.13: a class patched and restored 500 times loses its version tag, and a method
reading its attributes ran 3x slower after. A process that holds pins for its whole life
(``FI_PATCHES_PINS``, ``fi_patches.auto``, the vLLM and SGLang plugins, or one outer block)
installs once."""


class Hold:
    """One holder's share of an :class:`Installation` (what ``acquire`` returns)."""

    __slots__ = ("epoch", "installation", "released")

    def __init__(self, installation: Installation, epoch: int) -> None:
        self.installation = installation
        self.epoch = epoch
        self.released = False

    def release(self) -> None:
        self.installation.release(self)


class Installation:
    """Patches built by ``build`` while at least one :class:`Hold` of it is live."""

    def __init__(self, name: str, build: Callable[[], PatchSet]) -> None:
        self.name = name
        self.build = build
        self.lock = threading.RLock()
        self.count = 0
        self.epoch = 0
        self.installs = 0
        """How many times the patches were applied in this process."""
        self.patches: PatchSet | None = None

    @property
    def installed(self) -> bool:
        """Whether the patches are applied (some hold is live)."""
        return self.patches is not None

    def instrument(self) -> Hold:
        """The lifecycle entry's install: :meth:`acquire` (give the hold back to release it)."""
        return self.acquire()

    def uninstrument(self) -> None:
        """The lifecycle entry's removal: :meth:`revoke`."""
        self.revoke()

    def acquire(self) -> Hold:
        """Install (on the first holder); raises ``PatchError`` with nothing left applied."""
        with self.lock:
            if self.count == 0:
                patches = self.build()
                patches.apply()
                self.patches = patches
                self.installs += 1
                if self.installs == REINSTALLS_WARNED:
                    _warn_reinstalls(self.name, self.installs)
            self.count += 1
            return Hold(self, self.epoch)

    def release(self, hold: Hold) -> None:
        """Give ``hold`` back (once; a hold revoked by :meth:`revoke` gives back nothing)."""
        with self.lock:
            if hold.released or hold.epoch != self.epoch or self.count == 0:
                hold.released = True
                return
            hold.released = True
            self.count -= 1
            if self.count == 0:
                self._uninstall()

    def revoke(self) -> None:
        """Restore the originals now and void every hold given out so far."""
        with self.lock:
            self.count = 0
            self.epoch += 1
            self._uninstall()

    def _uninstall(self) -> None:
        if self.patches is not None:
            self.patches.revert()
            self.patches = None


def _warn_reinstalls(name: str, installs: int) -> None:
    log_once(
        logger,
        logging.WARNING,
        "reinstalls",  # one warning, whichever installation gets there first
        "fi_patches installed its %s wrappers for the %dth time in this process: each time it "
        "installs and removes them, FlashInfer's classes change, so FlashInfer's tuner runs "
        "slower for the next hundred or so calls, and from Python 3.13 a class changed about a "
        "thousand times is never specialized again (its tuner then runs slower for the rest of "
        "the process). Hold pins for the process's life instead: "
        "FI_PATCHES_PINS, fi_patches.auto, or one pinned_tactics() block around the blocks "
        "you open",
        name,
        installs,
    )


_runners: list[RunnerMethodPatch] = []
"""The runner wrappers of the live :data:`PINNING` installation (none while uninstalled)."""


def _wrap_runners(runners: Iterable[Any]) -> None:
    for patch in _runners:
        for runner in runners:
            patch.add_class(type(runner))


_runner_patch: list[RunnerMethodPatch] = []
"""The one runner wrapper patch, reused by every installation: a runner class wrapped again
keeps the wrapper it had (before 0.7.4 FlashInfer builds a class per call, and a block entered
per request would otherwise build a wrapper for each live class every time)."""


def _runner_method_patch() -> RunnerMethodPatch:
    base, method = fi_tuner.tunable_runner(), fi_tuner.RUNNER_VALID_TACTICS.name
    if not _runner_patch or _runner_patch[0].base is not base or _runner_patch[0].method != method:
        _runner_patch[:] = [RunnerMethodPatch(base, method, valid_tactics_replacement)]
    return _runner_patch[0]


def _build() -> PatchSet:
    tuner_class = fi_tuner.autotuner_class()
    runners = _runner_method_patch()
    patches = PatchSet(
        [
            AttributePatch(tuner_class, fi_tuner.SEARCH_CACHE.name, search_cache_replacement),
            WhileFlagged(
                tuner_class,
                fi_tuner.TUNING_FLAG,
                AttributePatch(
                    tuner_class, fi_tuner.CHOOSE_ONE.name, choose_one_replacement(_wrap_runners)
                ),
                lambda: [fi_tuner.tuner()],
            ),
            AttributePatch(tuner_class, fi_tuner.PROFILE_SINGLE_KERNEL.name, profile_replacement),
            runners,
            _Registered(runners),
        ]
    )
    return patches


class _Registered:
    """Lists a runner patch in :data:`_runners` while applied (so ``choose_one`` reaches it)."""

    def __init__(self, patch: RunnerMethodPatch) -> None:
        self.patch = patch

    def describe(self) -> str:
        return "fi_patches' registry of runner wrappers"

    def apply(self) -> None:
        _runners.append(self.patch)

    def revert(self) -> None:
        if self.patch in _runners:
            _runners.remove(self.patch)


PINNING = Installation("pinning", _build)
"""Held by each open ``pinned_tactics()`` block and by ``fi_patches.auto``."""


def hold_for(runner_names: Iterable[str]) -> Hold:
    """Acquire :data:`PINNING` and wrap the runner classes named (all or nothing)."""
    hold = PINNING.acquire()
    try:
        for patch in _runners:
            patch.add_names(runner_names)
    except BaseException:
        hold.release()
        raise
    return hold


def installed_count() -> int:
    """How many holders keep the wrappers installed (0 means stock)."""
    return PINNING.count
