"""``fi_patches.status()`` and ``refresh()``: each feature's state with the default pins it
would apply, and forgetting every verdict and cache so the next query looks again."""

from __future__ import annotations

from fi_patches import startup
from fi_patches.compat import features
from fi_patches.compat.features import FeatureStatus, status_of

__all__ = ["FeatureStatus", "refresh", "status"]


def status() -> list[FeatureStatus]:
    """One record per feature: name, enabled, reason, FlashInfer version, device and pins."""
    from fi_patches.compat.features import FEATURES
    from fi_patches.pins.table import describe_default_pins

    records = []
    for declared in FEATURES:
        record = status_of(declared.name)
        pins = describe_default_pins(declared.name, record)
        records.append(FeatureStatus(**{**record.__dict__, "pins": pins}))
    return records


def refresh() -> None:
    """Forget every verdict and every cache that depends on one, so the next query probes the
    installed packages and the device again; then each loaded patch set of the lifecycle
    registry forgets what it keeps (:func:`fi_patches.startup.refresh`)."""
    features.refresh()
    startup.refresh()
