"""Decide, once per process, whether each feature is enabled and why not, from the installed
FlashInfer, its internals, the device and the feature's self-check."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from fi_patches._logging import get_logger
from fi_patches.compat import selfcheck_cache
from fi_patches.compat.device import Device, current_device
from fi_patches.compat.feature import Feature
from fi_patches.compat.installed import InstalledFlashInfer, installed_flashinfer
from fi_patches.compat.versions import is_newer_than, is_verified

logger = get_logger(__name__)

ALLOW_UNVERIFIED_ENV = "FI_PATCHES_ALLOW_UNVERIFIED"


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


def _allow_unverified() -> bool:
    return os.environ.get(ALLOW_UNVERIFIED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _devices_text(devices: tuple[str, ...]) -> str:
    if len(devices) == 1:
        return devices[0]
    return ", ".join(devices[:-1]) + f" or {devices[-1]}"


def _evaluate(feature: Feature, fi: InstalledFlashInfer, device: Device) -> FeatureStatus:
    def result(enabled: bool, reason: str, probes: tuple[ProbeResult, ...] = ()) -> FeatureStatus:
        return FeatureStatus(
            name=feature.name,
            enabled=enabled,
            reason=reason,
            flashinfer=fi.label,
            device=device.label,
            verified=str(feature.verified),
            probes=probes,
        )

    if not fi.present:
        return result(False, "FlashInfer (flashinfer-python) is not installed.")
    if fi.import_error is not None:
        return result(
            False, f"import flashinfer failed ({fi.import_error}), so every patch is off."
        )
    version = fi.version
    if version is None:
        return result(False, f"FlashInfer's version {fi.version_text!r} is not a PEP 440 version.")

    probes = tuple(ProbeResult(p.describe(), p.check()) for p in feature.probes)
    failed = [p for p in probes if not p.ok]
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
        if not (where == "newer than" and _allow_unverified()):
            hint = f"; set {ALLOW_UNVERIFIED_ENV}=1 to enable it" if where == "newer than" else ""
            return result(
                False,
                f"FlashInfer {version} is {where} the verified range {feature.verified} "
                f"(all {len(probes)} probes pass{hint}).",
                probes,
            )
        allowed_unverified = True
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
    try:
        failure = selfcheck_cache.outcome(
            feature.name,
            feature.self_check,
            device,
            probes,
            lambda: feature.load_self_check()(device),
        )
    except Exception as exc:
        failure = f"the self-check raised {type(exc).__name__}: {exc}"
    if failure is not None:
        return result(False, f"self-check failed on FlashInfer {version}: {failure}", probes)
    if allowed_unverified:
        reason = (
            f"FlashInfer {version} is unverified (verified: {feature.verified}); enabled by "
            f"{ALLOW_UNVERIFIED_ENV}=1 because all {len(probes)} probes and the self-check pass."
        )
    else:
        reason = f"FlashInfer {version} is verified; {len(probes)} probes and the self-check pass."
    return result(True, reason, probes)


_lock = threading.RLock()
_cache: dict[str, FeatureStatus] = {}


def status_of(name: str) -> FeatureStatus:
    """The state of the feature ``name``, evaluated once per process (see :func:`refresh`)."""
    from fi_patches.compat.registry import feature

    with _lock:
        cached = _cache.get(name)
        if cached is None:
            cached = _evaluate(feature(name), installed_flashinfer(), current_device())
            _cache[name] = cached
            level = 20 if cached.enabled else 10
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
    if "fi_patches.mxfp8.routes" in sys.modules:
        sys.modules["fi_patches.mxfp8.routes"].forget()
