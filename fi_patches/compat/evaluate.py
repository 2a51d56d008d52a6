"""Decide, once per process, whether each feature is enabled and why not, from the installed
FlashInfer, its internals, the device and the feature's self-check."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from packaging.version import Version

from fi_patches._logging import get_logger
from fi_patches.compat.device import Device, current_device
from fi_patches.compat.feature import Feature
from fi_patches.compat.installed import InstalledFlashInfer, installed_flashinfer
from fi_patches.compat.requirements import (
    ALLOW_UNVERIFIED_ENV,
    RequirementCheck,
    allow_unverified,
    check_requirement,
)
from fi_patches.compat.versions import is_newer_than, is_verified

logger = get_logger(__name__)

__all__ = ["ALLOW_UNVERIFIED_ENV", "FeatureStatus", "ProbeResult", "refresh", "status", "status_of"]

NO_DEVICE = Device(None, "none", "no particular device needed")


@dataclass(frozen=True)
class ProbeResult:
    """One probe's outcome: ``reason`` is None when it passed."""

    probe: str
    reason: str | None

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class FeatureStatus:
    """One feature's state, as ``fi_patches.status()`` and ``doctor`` report it."""

    name: str
    enabled: bool
    reason: str
    flashinfer: str
    device: str
    verified: str
    probes: tuple[ProbeResult, ...] = field(default=())
    pins: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["probes"] = [{"probe": p.probe, "ok": p.ok, "reason": p.reason} for p in self.probes]
        return data


def _devices_text(devices: tuple[str, ...]) -> str:
    if len(devices) == 1:
        return devices[0]
    return ", ".join(devices[:-1]) + f" or {devices[-1]}"


def _verified_text(feature: Feature) -> str:
    parts = [str(feature.verified)] if feature.uses_flashinfer else []
    return "; ".join(parts + [f"{r.distribution}{r.verified}" for r in feature.requires])


def _evaluate(
    feature: Feature, fi: InstalledFlashInfer | None, device: Device | None
) -> FeatureStatus:
    """``fi`` is None for a feature that does not use FlashInfer, ``device`` None for one that
    needs no particular device (see :func:`status_of`)."""

    def result(enabled: bool, reason: str, probes: tuple[ProbeResult, ...] = ()) -> FeatureStatus:
        return FeatureStatus(
            name=feature.name,
            enabled=enabled,
            reason=reason,
            flashinfer=fi.label if fi is not None else "-",
            device=device.label if device is not None else "any",
            verified=_verified_text(feature),
            probes=probes,
        )

    # INTERIM (issue 13): other distributions (vLLM) first, with the same gates as FlashInfer's.
    checks: list[RequirementCheck] = []
    probes: tuple[ProbeResult, ...] = ()
    for requirement in feature.requires:
        check = check_requirement(requirement)
        probes += tuple(ProbeResult(p, r) for p, r in check.probes)
        if check.reason is not None:
            return result(False, check.reason, probes)
        checks.append(check)
    if fi is None:
        return _self_checked(feature, device, checks, probes, result)
    if not fi.present:
        return result(False, "FlashInfer (flashinfer-python) is not installed.")
    if fi.import_error is not None:
        return result(
            False, f"import flashinfer failed ({fi.import_error}), so every patch is off."
        )
    version = fi.version
    if version is None:
        return result(False, f"FlashInfer's version {fi.version_text!r} is not a PEP 440 version.")

    own = tuple(ProbeResult(p.describe(), p.check()) for p in feature.probes)
    probes += own
    failed = [p for p in own if not p.ok]
    if failed:
        extra = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return result(
            False,
            f"FlashInfer {version} lacks an internal it needs: {failed[0].reason}{extra}.",
            probes,
        )
    allowed_unverified = False
    if not is_verified(version, feature.verified):
        where = "newer than" if is_newer_than(version, feature.verified) else "outside"
        if not (where == "newer than" and allow_unverified()):
            hint = f"; set {ALLOW_UNVERIFIED_ENV}=1 to enable it" if where == "newer than" else ""
            return result(
                False,
                f"FlashInfer {version} is {where} the verified range {feature.verified} "
                f"(all {len(own)} probes pass{hint}).",
                probes,
            )
        allowed_unverified = True
    if device is None:  # a FlashInfer feature that needs no particular device
        return _self_checked(feature, device, checks, probes, result, version, allowed_unverified)
    if device.arch is None:
        return result(
            False,
            f"needs {_devices_text(feature.devices)} but there is {device.detail} "
            f"(FI_PATCHES_DEVICE=sm_103 validates offline).",
            probes,
        )
    if device.arch not in feature.devices:
        return result(
            False, f"needs {_devices_text(feature.devices)}; this device is {device.arch}.", probes
        )
    return _self_checked(feature, device, checks, probes, result, version, allowed_unverified)


def _self_checked(
    feature: Feature,
    device: Device | None,
    checks: list[RequirementCheck],
    probes: tuple[ProbeResult, ...],
    result: Callable[[bool, str, tuple[ProbeResult, ...]], FeatureStatus],
    version: Version | None = None,
    allowed_unverified: bool = False,
) -> FeatureStatus:
    """Run the self-check and word the verdict (``version``: FlashInfer's, when it is used)."""
    try:
        failure = feature.load_self_check()(device or NO_DEVICE)
    except Exception as exc:
        failure = f"the self-check raised {type(exc).__name__}: {exc}"
    flashinfer = [f"FlashInfer {version}"] if version is not None else []
    verified = [c.label for c in checks if not c.unverified]
    if not allowed_unverified:
        verified += flashinfer
    if failure is not None:
        where = " and ".join(verified or flashinfer) or "this setup"
        return result(False, f"self-check failed on {where}: {failure}", probes)
    unverified = [f"{c.label} is unverified (verified: {c.requirement.verified})" for c in checks]
    unverified = [text for c, text in zip(checks, unverified, strict=True) if c.unverified]
    if allowed_unverified:
        unverified.append(f"FlashInfer {version} is unverified (verified: {feature.verified})")
    if unverified:
        return result(
            True,
            f"{'; '.join(unverified)}; enabled by {ALLOW_UNVERIFIED_ENV}=1 because all "
            f"{len(probes)} probes and the self-check pass.",
            probes,
        )
    are = "is" if len(verified) == 1 else "are"
    return result(
        True,
        f"{' and '.join(verified)} {are} verified; {len(probes)} probes and the self-check pass.",
        probes,
    )


_lock = threading.RLock()
_cache: dict[str, FeatureStatus] = {}


def status_of(name: str) -> FeatureStatus:
    """The state of the feature ``name``, evaluated once per process (see :func:`refresh`)."""
    from fi_patches.compat.registry import feature

    with _lock:
        cached = _cache.get(name)
        if cached is None:
            declared = feature(name)
            cached = _evaluate(
                declared,
                installed_flashinfer() if declared.uses_flashinfer else None,
                current_device() if declared.devices else None,
            )
            _cache[name] = cached
            level = logging.INFO if cached.enabled else logging.DEBUG
            logger.log(level, "feature %s: %s", name, cached.reason)
        return cached


def status() -> list[FeatureStatus]:
    """One record per feature: name, enabled, reason, FlashInfer version, device and pins."""
    from fi_patches.compat.registry import features
    from fi_patches.pins.default import describe_default_pins

    records = []
    for declared in features():
        record = status_of(declared.name)
        pins = describe_default_pins(declared.name, record)
        records.append(FeatureStatus(**{**record.__dict__, "pins": pins}))
    return records


def refresh() -> None:
    """Forget every verdict, so the next query probes FlashInfer and the device again."""
    from fi_patches.pinning import resolve
    from fi_patches.pins.default import forget_loaded_files

    with _lock:
        _cache.clear()
        installed_flashinfer(refresh=True)
    forget_loaded_files()
    resolve.forget()
    for module in ("fi_patches.mxfp8.routes", "fi_patches.vllm.gemm"):
        if module in sys.modules:
            sys.modules[module].forget()
