"""Reversible patches of FlashInfer objects: applied all together or not at all, and reverted
to the exact original objects."""

from fi_patches.patching.patch import AttributePatch, Patch, PatchError, PatchSet
from fi_patches.patching.subclasses import RunnerMethodPatch

__all__ = ["AttributePatch", "Patch", "PatchError", "PatchSet", "RunnerMethodPatch"]
