"""Reversible patches of FlashInfer objects: applied all together or not at all, and reverted
to the exact original objects."""

from fi_patches.patching.attribute import AttributePatch
from fi_patches.patching.patch_set import Patch, PatchError, PatchSet
from fi_patches.patching.runner_classes import RunnerMethodPatch

__all__ = ["AttributePatch", "Patch", "PatchError", "PatchSet", "RunnerMethodPatch"]
