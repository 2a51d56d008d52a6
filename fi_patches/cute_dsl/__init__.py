"""Pinned ``cute-dsl`` MXFP8 tactics: ``pinned_mm`` runs FlashInfer's cute-dsl runner with the
pinned tactic of a row range, without the tuner."""

from fi_patches.cute_dsl.pinned_mm import pinned_mm

__all__ = ["pinned_mm"]
