"""The compat layer: what FlashInfer and device are installed, which internals each feature needs,
and whether each feature is enabled (with the reason when it is not)."""

from fi_patches.compat.evaluate import FeatureStatus, refresh, status, status_of

__all__ = ["FeatureStatus", "refresh", "status", "status_of"]
