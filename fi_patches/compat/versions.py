"""Prerelease-aware version checks: a FlashInfer release is verified only if a declared
specifier admits it, so 0.7.5rc1 or 0.7.4.post1 never pass as 0.7.4."""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


def parse_version(text: str) -> Version | None:
    """``text`` as a PEP 440 version, or None when it is not one."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def parse_specifier(text: str) -> SpecifierSet:
    """``text`` as a specifier set; raises ``ValueError`` with the text when it is not one."""
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise ValueError(f"{text!r} is not a version specifier such as '>=0.7.0,<=0.7.4'") from exc


def is_verified(version: Version, verified: SpecifierSet) -> bool:
    """Whether ``version`` is inside ``verified``.

    Pre- and dev-releases are admitted only when the specifier names one itself, whatever
    the installed ``packaging``'s default (it changed across releases), and post-releases
    only when the bounds include them.
    """
    return verified.contains(version, prereleases=bool(verified.prereleases))


def is_newer_than(version: Version, verified: SpecifierSet) -> bool:
    """Whether ``version`` lies above every upper bound of ``verified``."""
    uppers = [Version(s.version) for s in verified if s.operator in ("<", "<=", "==", "===")]
    if not uppers:
        return False
    public = Version(version.public)  # a local build label (+cu130) is not a newer release
    return all(public > upper for upper in uppers)


def is_listed(version: Version, releases: tuple[str, ...]) -> bool:
    """Whether ``version`` is one of ``releases`` (PEP 440 equality: 0.7.4 is 0.7.4.0, and a
    local build label such as +cu130 does not make another release)."""
    public = Version(version.public)
    return any(Version(r) == public for r in releases)


def neighbours(version: Version, releases: tuple[str, ...]) -> tuple[str | None, str | None]:
    """The closest of ``releases`` below and above ``version`` (None where there is none)."""
    ordered = sorted(releases, key=Version)
    below = [r for r in ordered if Version(r) < version]
    above = [r for r in ordered if Version(r) > version]
    return (below[-1] if below else None, above[0] if above else None)
