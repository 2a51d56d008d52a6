"""The ``wide_tile`` self-check: FlashInfer's kernel class, subclassed, compiles a 16-row tile
for the device, and its PTX issues the MMA with N = 16 and keeps the PDL ordering."""

from __future__ import annotations

from fi_patches.compat.device import Device

CHECK_TILE = 16


def self_check(device: Device) -> str | None:
    from fi_patches.wide.compile import compile_wide
    from fi_patches.wide.idesc import descriptors
    from fi_patches.wide.pdl import pdl_order
    from fi_patches.wide.ptx import parse_entry
    from fi_patches.wide.tactics import wide_tactics

    arch = f"{device.arch}a"
    tactics = wide_tactics(7168, 1536, CHECK_TILE, arch=arch)
    if not tactics:
        return f"no valid wide tactic for a 7168x1536 weight at tile {CHECK_TILE}"
    kernel = compile_wide(CHECK_TILE, tactics[0], arch=arch)
    if kernel.ptx is None:
        return "the DSL kept no PTX for the compiled kernel"
    entry = parse_entry(kernel.ptx)
    widths = {d.n for choices in descriptors(entry) for d in choices}
    if widths != {CHECK_TILE}:
        return f"the compiled MMA runs N = {sorted(widths)}, not the requested tile {CHECK_TILE}"
    order = pdl_order(entry)
    if not order.ok:
        return f"the compiled kernel lost its PDL ordering ({order})"
    return None
