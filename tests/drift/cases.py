"""The drift cases, computed from the boundary: one per declared internal and mutation that
fits it (:func:`mutations`), so an internal declared without a probe that
catches each of its mutations fails the suite."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from fi_patches.internals import (
    CALLABLE,
    FACTORY,
    METHOD,
    MODULE,
    Declared,
    Internal,
    OneOf,
    declared,
)

BASELINE = "baseline"
"""The id of the run with nothing broken, that every case is compared with."""

ABSENCE = ("removed", "renamed")
"""The mutations that make an internal absent (allowed for optional internals)."""

REACTIONS = ("renamed", "wrong_shape", "raising", "rebound")
"""The mutations that test how fi_patches reacts to an internal misbehaving (a rename is
absence as every observer sees it, like ``removed``): marked ``newest_release``, they run in the
main run on the newest release, while the compat matrix's cells run each internal's removal
and signature change, what a release changes."""


def mutations(internal: Declared) -> tuple[str, ...]:
    """The drift mutations that fit ``internal``: how a release could break it.

    ``removed`` and ``renamed`` fit every attribute (a module can only be removed);
    ``signature`` fits a callable with declared parameters; ``rebound`` a factory whose class
    fi_patches finds in its body; ``raising`` (callables) and ``wrong_shape`` fit whatever the
    probe exercises (an internal that cannot be exercised on every machine, such as a kernel
    launch, gets the structural mutations only).
    """
    if isinstance(internal, OneOf):
        return ("removed",)
    if internal.kind == MODULE:
        return ("removed",)
    found = ["removed", "renamed"]
    if internal.params:
        found.append("signature")
    if internal.builds:
        found.append("rebound")
    if internal.check is not None:
        if internal.kind in (CALLABLE, METHOD, FACTORY):
            found.append("raising")
        found.append("wrong_shape")
    return tuple(found)


@dataclass(frozen=True)
class Case:
    """One internal broken one way; ``id`` is ``key-mutation`` (what ``pytest -k`` selects)."""

    key: str
    mutation: str

    @property
    def id(self) -> str:
        return f"{self.key}-{self.mutation}"

    @property
    def internal(self) -> Declared:
        return by_key(self.key)


def by_key(key: str) -> Declared:
    """The declared internal called ``key``."""
    for internal in declared():
        if internal.key == key:
            return internal
    raise KeyError(f"no declared internal {key!r}")


def all_cases() -> list[Case]:
    """Every case, in declaration order."""
    return [Case(i.key, m) for i in declared() for m in mutations(i)]


def coverage() -> tuple[int, int]:
    """``(internals, mutations)`` the boundary declares."""
    internals = declared()
    return len(internals), sum(len(mutations(i)) for i in internals)


def absence_allowed(internal: Declared, version: Version | None) -> bool:
    """Whether ``internal`` may be absent on ``version``: it is optional, or needed only from
    a later release."""
    if internal.optional:
        return True
    return internal.since is not None and (version is None or version < internal.since)


def must_disable(case: Case, version: Version | None) -> tuple[str, ...]:
    """The features the case must disable: those that declare the internal, unless the
    mutation only makes it absent and absence is allowed here."""
    internal = case.internal
    if case.mutation in ABSENCE and absence_allowed(internal, version):
        return ()
    return tuple(internal.features)


def paths(internal: Declared) -> tuple[str, ...]:
    """The paths a reason may name for ``internal`` (any option of a ``OneOf``)."""
    if isinstance(internal, OneOf):
        return tuple(o.path for o in internal.options)
    assert isinstance(internal, Internal)
    return (internal.path,)
