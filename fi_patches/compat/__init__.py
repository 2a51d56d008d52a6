"""The compat layer: what the patched packages and the device are, and whether each feature is
enabled (with the reason when it is not)."""

from fi_patches.compat.evaluate import FeatureStatus, refresh, status_of

__all__ = ["FeatureStatus", "refresh", "status_of"]
