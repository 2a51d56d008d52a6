"""The names of the features that FlashInfer's internals are declared for (one place, so the
boundary's modules can name them without importing each other)."""

PINNED_OPS = "pinned_ops"
"""``[[pin]]`` entries: any op FlashInfer tunes, by its tuner key."""

PINNED_TACTICS = "pinned_tactics"
PINNED_CUTE_DSL = "pinned_cute_dsl"
WIDE_TILE = "wide_tile"
PRESEED = "preseed"

ENGINE = (PINNED_OPS, PINNED_TACTICS, PINNED_CUTE_DSL, WIDE_TILE, PRESEED)
"""Every feature whose pins go through fi_patches' wrappers of FlashInfer's tuner."""
