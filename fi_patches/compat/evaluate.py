"""Decide, once per process, whether each feature is enabled and why not, from the installed
package it patches, the internals it needs, the device and the feature's self-check."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from fi_patches import _env
from fi_patches._logging import get_logger
from fi_patches.compat.device import Device, current_device
from fi_patches.compat.feature import Feature
from fi_patches.compat.installed import Installed, installed
from fi_patches.compat.installed import forget as forget_installed
from fi_patches.compat.versions import is_newer_than, is_verified
from fi_patches.internals import Declared, InternalError, error_text

logger = get_logger(__name__)


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


def _probe(internal: Declared, version: Any) -> ProbeResult:
    """One internal's probe: a ``since`` internal is not needed before its release, and an
    optional one may be absent (its users then take their documented fallback)."""
    if internal.since is not None and version is not None and version < internal.since:
        return ProbeResult(internal.path, None)
    if internal.optional:
        try:
            internal.resolve()
        except InternalError:
            return ProbeResult(internal.path, None)
    return ProbeResult(internal.path, internal.probe())


def evaluate(feature: Feature, fi: Installed, device: Device) -> FeatureStatus:
    """The state of ``feature`` given the installed package and the device (no caching)."""
    package = feature.requires.module
    name = feature.requires.label

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
        return result(False, f"{name} ({feature.requires.distribution}) is not installed.")
    if fi.import_error is not None:
        return result(False, f"import {package} failed ({fi.import_error}), so every patch is off.")
    version = fi.version
    if version is None:
        return result(False, f"{name}'s version {fi.version_text!r} is not a PEP 440 version.")

    probes = tuple(_probe(internal, version) for internal in feature.internals())
    failed = [p for p in probes if not p.ok]
    if failed:
        extra = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return result(
            False,
            f"{name} {version} lacks an internal it needs: {failed[0].reason}{extra}.",
            probes,
        )
    allowed_unverified = False
    if not is_verified(version, feature.verified):
        where = "newer than" if is_newer_than(version, feature.verified) else "outside"
        if not (where == "newer than" and _env.flag(_env.ALLOW_UNVERIFIED)):
            hint = (
                f"; set {_env.ALLOW_UNVERIFIED.name}=1 to enable it"
                if where == "newer than"
                else ""
            )
            return result(
                False,
                f"{name} {version} is {where} the verified range {feature.verified} "
                f"(all {len(probes)} probes pass{hint}).",
                probes,
            )
        allowed_unverified = True
    if device.arch is None:
        return result(
            False,
            f"needs {_devices_text(feature.devices)}, but {device.absence} "
            f"({_env.DEVICE.name}=sm_103 validates offline).",
            probes,
        )
    if device.arch not in feature.devices:
        return result(
            False, f"needs {_devices_text(feature.devices)}; this device is {device.arch}.", probes
        )
    try:
        failure = feature.load_self_check()(device)
    except Exception as exc:
        failure = f"the self-check raised {error_text(exc)}"
    if failure is not None:
        return result(False, f"self-check failed on {name} {version}: {failure}", probes)
    if allowed_unverified:
        reason = (
            f"{name} {version} is unverified (verified: {feature.verified}); enabled by "
            f"{_env.ALLOW_UNVERIFIED.name}=1 because all {len(probes)} probes and the "
            "self-check pass."
        )
    else:
        reason = f"{name} {version} is verified; {len(probes)} probes and the self-check pass."
    return result(True, reason, probes)


_lock = threading.RLock()
_cache: dict[str, FeatureStatus] = {}


def status_of(name: str) -> FeatureStatus:
    """The state of the feature ``name``, evaluated once per process (see :func:`refresh`)."""
    from fi_patches.features import feature

    with _lock:
        cached = _cache.get(name)
        if cached is None:
            declared = feature(name)
            cached = evaluate(declared, installed(declared.requires), current_device())
            _cache[name] = cached
            level = logging.INFO if cached.enabled else logging.DEBUG
            logger.log(level, "feature %s: %s", name, cached.reason)
        return cached


_forgetters: list[Callable[[], None]] = []


def on_refresh(forget: Callable[[], None]) -> Callable[[], None]:
    """Register ``forget`` (a cache's reset) to run at every :func:`refresh`; returns it, so it
    can decorate the function."""
    _forgetters.append(forget)
    return forget


def refresh() -> None:
    """Forget every verdict and every cache that depends on one, so the next query probes the
    installed packages and the device again."""
    with _lock:
        _cache.clear()
        forget_installed()
    for forget in list(_forgetters):
        forget()
