"""``fi_patches.status()`` and ``refresh()``: each feature's state with the default pins it
would apply."""

from __future__ import annotations

from fi_patches.compat.evaluate import FeatureStatus, refresh, status_of

__all__ = ["FeatureStatus", "refresh", "status"]


def status() -> list[FeatureStatus]:
    """One record per feature: name, enabled, reason, FlashInfer version, device and pins."""
    from fi_patches.features import FEATURES
    from fi_patches.pins.default import describe_default_pins

    records = []
    for declared in FEATURES:
        record = status_of(declared.name)
        pins = describe_default_pins(declared.name, record)
        records.append(FeatureStatus(**{**record.__dict__, "pins": pins}))
    return records
