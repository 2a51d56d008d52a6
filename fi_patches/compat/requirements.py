"""Whether another distribution a feature needs (vLLM) is installed, verified and has every
internal the feature probes, with the reason when it is not. Nothing here asks for a device or
imports FlashInfer, so a vLLM plugin can run it in any process.

INTERIM (issue 13): the Feature redesign checks FlashInfer the same way.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass

from fi_patches.compat.feature import Requirement
from fi_patches.compat.versions import is_newer_than, is_verified, parse_version

ALLOW_UNVERIFIED_ENV = "FI_PATCHES_ALLOW_UNVERIFIED"


@dataclass(frozen=True)
class RequirementCheck:
    """One requirement's verdict: ``reason`` is None when it holds."""

    requirement: Requirement
    version: str | None
    reason: str | None
    probes: tuple[tuple[str, str | None], ...] = ()
    """Each probe's description and failure reason (None: it passed)."""
    unverified: bool = False
    """It holds only because ``FI_PATCHES_ALLOW_UNVERIFIED=1`` admits a newer release."""

    @property
    def label(self) -> str:
        """``vLLM 0.34.0``, or ``vLLM`` when it is not installed."""
        name = self.requirement.label
        return f"{name} {self.version}" if self.version else name


def allow_unverified() -> bool:
    return os.environ.get(ALLOW_UNVERIFIED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _installed_version(requirement: Requirement) -> str | None:
    try:
        return importlib.metadata.version(requirement.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_requirement(requirement: Requirement) -> RequirementCheck:
    """Check ``requirement`` now: installed, every probe passing, version verified (or newer
    and allowed). The probes import the modules they name."""
    name = requirement.label
    try:
        found = importlib.util.find_spec(requirement.module) is not None
    except (ImportError, ValueError):
        found = False
    text = _installed_version(requirement) if found else None
    if not found or text is None:
        return RequirementCheck(
            requirement, None, f"{name} ({requirement.distribution}) is not installed."
        )
    version = parse_version(text)
    if version is None:
        return RequirementCheck(
            requirement, text, f"{name}'s version {text!r} is not a PEP 440 version."
        )
    probes = tuple((p.describe(), p.check()) for p in requirement.probes)
    failed = [reason for _, reason in probes if reason is not None]
    if failed:
        extra = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return RequirementCheck(
            requirement,
            text,
            f"{name} {version} lacks an internal it needs: {failed[0]}{extra}.",
            probes,
        )
    verified = requirement.verified
    if is_verified(version, verified):
        return RequirementCheck(requirement, text, None, probes)
    newer = is_newer_than(version, verified)
    if newer and allow_unverified():
        return RequirementCheck(requirement, text, None, probes, unverified=True)
    where = "newer than" if newer else "outside"
    hint = f"; set {ALLOW_UNVERIFIED_ENV}=1 to enable it" if newer else ""
    return RequirementCheck(
        requirement,
        text,
        f"{name} {version} is {where} the verified range {verified} "
        f"(all {len(probes)} probes pass{hint}).",
        probes,
    )
