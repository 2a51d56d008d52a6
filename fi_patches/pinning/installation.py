"""Reference-counted installation of the pinning wrappers, per feature: the first acquire
patches, the last release restores the exact original objects. The tuner-cache wrapper is
shared by every feature that pins a tuned runner."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fi_patches.features import FEATURES
from fi_patches.internals import flashinfer as fi
from fi_patches.patching import AttributePatch, PatchSet, RunnerMethodPatch
from fi_patches.pinning.offers import valid_tactics_replacement
from fi_patches.pinning.tuner_cache import search_cache_replacement


class Installation:
    """Patches built by ``build`` while at least one holder has acquired them."""

    def __init__(
        self, name: str, build: Callable[[], PatchSet], needs: tuple[Installation, ...] = ()
    ) -> None:
        self.name = name
        self.build = build
        self.needs = needs
        self.lock = threading.Lock()
        self.count = 0
        self.patches: PatchSet | None = None

    def acquire(self) -> None:
        """Install (on the first holder); raises ``PatchError`` with nothing left applied."""
        held: list[Installation] = []
        try:
            for need in self.needs:
                need.acquire()
                held.append(need)
            with self.lock:
                if self.count == 0:
                    patches = self.build()
                    patches.apply()
                    self.patches = patches
                self.count += 1
        except BaseException:
            for need in reversed(held):
                need.release()
            raise

    def release(self) -> None:
        with self.lock:
            if self.count == 0:
                return
            self.count -= 1
            if self.count == 0 and self.patches is not None:
                self.patches.revert()
                self.patches = None
        for need in reversed(self.needs):
            need.release()


def _tuner_patches() -> PatchSet:
    return PatchSet(
        [AttributePatch(fi.autotuner_class(), fi.SEARCH_CACHE.name, search_cache_replacement)]
    )


def _runner_patches(runners: tuple[Any, ...]) -> Callable[[], PatchSet]:
    def build() -> PatchSet:
        base = fi.tunable_runner()
        patches: list[Any] = [
            RunnerMethodPatch(
                base,
                t.module,
                t.class_name,
                fi.RUNNER_VALID_TACTICS.name,
                valid_tactics_replacement(t),
            )
            for t in runners
        ]
        return PatchSet(patches)

    return build


TUNER_CACHE = Installation("tuner_cache", _tuner_patches)

INSTALLATIONS: dict[str, Installation] = {
    f.name: Installation(f.name, _runner_patches(f.runners), (TUNER_CACHE,))
    for f in FEATURES
    if f.runners
}


def installation(feature: str) -> Installation:
    """The installation of the runner wrappers of ``feature``."""
    return INSTALLATIONS[feature]


def installed_count() -> int:
    """How many holders keep wrappers installed, over all installations (0 means stock)."""
    return TUNER_CACHE.count + sum(i.count for i in INSTALLATIONS.values())
