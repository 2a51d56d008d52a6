"""The target a pin table's ``[meta]`` and a feature's verdict are about: the GPU architecture
and the release. Nothing here imports a patched package, so the lockfile format reads it.

Which GPU architecture fi_patches targets is decided by one rule everywhere:

1. an arch passed explicitly (``precompile --arch``, ``compile_wide(arch=...)``);
2. ``FI_PATCHES_DEVICE`` (offline validation and CPU tests; it wins over a real device);
3. the current CUDA device;
4. for compiling only, ``CUTE_DSL_ARCH`` (the DSL's own cross-compile target).

Features are gated on the arch *family* (``sm_103``); compiling keeps the suffix (``sm_103a``).

Prerelease-aware version checks: a FlashInfer release is verified only if a declared
specifier admits it, so 0.7.5rc1 or 0.7.4.post1 never pass as 0.7.4.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from fi_patches import _env

NO_CUDA = "no CUDA device"

_ARCH = re.compile(r"^sm_?(\d{2,3})([af]?)$")

KNOWN_ARCHS = (
    *("sm_10", "sm_11", "sm_12", "sm_13", "sm_20", "sm_21"),
    *("sm_30", "sm_32", "sm_35", "sm_37", "sm_50", "sm_52", "sm_53"),
    *("sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75"),
    *("sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90"),
    *("sm_100", "sm_101", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121"),
)
"""Every arch family some CUDA release (``nvcc --list-gpu-arch``, 1.0 to 13.0) or FlashInfer
release (``sm_107``) names. Every arch string that enters fi_patches (``FI_PATCHES_DEVICE``,
``--device``, ``--arch``, a table's ``[meta] device``) is one of these, or it is refused: a
typo such as ``sm_1003`` would otherwise match no device and silently pin nothing."""


def parse_arch(text: str) -> tuple[str, str] | None:
    """``("sm_103", "a")`` for ``sm_103a``/``SM103A``; ``("sm_103", "")`` for ``sm_103``; None
    when ``text`` is not an arch of :data:`KNOWN_ARCHS` (:func:`arch_error` says why)."""
    match = _ARCH.match(text.strip().lower())
    if match is None or f"sm_{match.group(1)}" not in KNOWN_ARCHS:
        return None
    return (f"sm_{match.group(1)}", match.group(2))


def unknown_arch(text: str) -> str | None:
    """For ``text`` of an arch's form (``sm_999``) that no CUDA or FlashInfer release names,
    the clause saying so with the list of those that are; else None."""
    match = _ARCH.match(text.strip().lower())
    if match is None or f"sm_{match.group(1)}" in KNOWN_ARCHS:
        return None
    return f"names no arch of any CUDA or FlashInfer release (known: {', '.join(KNOWN_ARCHS)})"


def arch_error(text: str) -> str:
    """Why ``text`` is not an arch, as a clause starting with it: not of the form ``sm_103``, or
    a form no release names (:func:`unknown_arch`)."""
    return f"{text!r} {unknown_arch(text) or 'is not an arch such as sm_103'}"


def normalize_arch(text: str) -> str | None:
    """``sm_103``, ``sm103``, ``sm_103a`` -> ``sm_103``; None when ``text`` is not an arch."""
    parsed = parse_arch(text)
    return parsed[0] if parsed else None


@dataclass(frozen=True)
class Device:
    """The target: ``arch`` is the family (``sm_103``) and ``suffix`` its ``a``/``f`` suffix as
    given; ``arch`` is None when there is none, and ``detail`` then says why."""

    arch: str | None
    source: str
    detail: str
    suffix: str = ""

    @property
    def sm_version(self) -> int | None:
        """The arch as FlashInfer's runners take it (103 for sm_103)."""
        return int(self.arch[3:]) if self.arch else None

    @property
    def label(self) -> str:
        return self.arch if self.arch else f"none ({self.detail})"

    @property
    def absence(self) -> str:
        """Why there is no target, as a clause ("there is no CUDA device")."""
        return f"there is {self.detail}" if self.detail == NO_CUDA else self.detail


def _from_text(text: str, source: str, name: str) -> Device:
    parsed = parse_arch(text)
    if parsed is None:
        return Device(None, source, f"{name}={arch_error(text)}")
    return Device(parsed[0], source, f"{name}={text}", parsed[1])


def _cuda_device() -> Device:
    try:
        import torch
    except Exception as exc:
        return Device(None, "none", f"torch is not importable ({type(exc).__name__})")
    try:
        if not torch.cuda.is_available():
            return Device(None, "none", NO_CUDA)
        major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    except Exception as exc:
        return Device(None, "none", f"CUDA query failed ({type(exc).__name__}: {exc})")
    return Device(f"sm_{major}{minor}", "torch.cuda", torch.cuda.get_device_name())


def target_device(explicit: str | None = None, *, compiling: bool = False) -> Device:
    """The target by the rule in the module docstring (read now: cheap; the compat layer caches
    its verdicts, not this)."""
    if explicit:
        return _from_text(explicit, "arch", "arch")
    override = _env.get(_env.DEVICE)
    if override:
        return _from_text(override, "env", _env.DEVICE.name)
    found = _cuda_device()
    if found.arch is None and compiling:
        dsl_arch = _env.get(_env.CUTE_DSL_ARCH)
        if dsl_arch:
            return _from_text(dsl_arch, "env", _env.CUTE_DSL_ARCH.name)
    return found


def device_properties() -> str:
    """What reading the current CUDA device's properties gives in this process: its SM count,
    or the error (CPU-only torch). FlashInfer's cute-dsl runner reads them to list its tactics,
    so a check of it that passed where they read says nothing where they do not. Torch is not
    imported for this."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch not imported"
    try:
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return f"{torch.cuda.get_device_properties(index).multi_processor_count} SMs"
    except Exception as exc:
        return f"unreadable ({type(exc).__name__})"


def current_device() -> Device:
    """The device features are gated on: ``FI_PATCHES_DEVICE``, else the CUDA device."""
    return target_device()


# release versions ---------------------------------------------------------------------------------


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
