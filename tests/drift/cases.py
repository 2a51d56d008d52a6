"""The drift cases, computed from the boundary: one per declared internal and mutation that
fits it (``fi_patches.internals.mutations``), so an internal declared without a probe that
catches each of its mutations fails the suite."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from fi_patches.internals import Declared, Internal, OneOf, declared, mutations

BASELINE = "baseline"
"""The id of the run with nothing broken, that every case is compared with."""

ABSENCE = ("removed", "renamed")
"""The mutations that make an internal absent (allowed for optional internals)."""


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
