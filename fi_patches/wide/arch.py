"""Which GPU arch a wide kernel is compiled for, by the one rule of
:mod:`fi_patches.compat.target` (explicit, ``FI_PATCHES_DEVICE``, the CUDA device, then
``CUTE_DSL_ARCH``). The DSL embeds only SASS for that exact arch (no PTX), so a kernel built for
sm_100a does not load on sm_103 and vice versa."""

from __future__ import annotations

from fi_patches.compat.target import parse_arch, target_device

SUPPORTED_ARCHS = ("sm_100a", "sm_100f", "sm_103a")
"""Targets the kernel's block-scaled MMA accepts among the Blackwell datacenter parts."""


class WideArchError(RuntimeError):
    """No arch to compile for, or one the wide kernel does not support."""


def normalize(arch: str) -> str:
    """``sm_103``, ``sm103``, ``SM_103A`` -> ``sm_103a`` (a bare arch gets the ``a`` suffix the
    tcgen05 instructions need); WideArchError when unsupported."""
    parsed = parse_arch(arch)
    if parsed is None:
        raise WideArchError(f"{arch!r} is not a GPU arch such as sm_103a")
    text = f"{parsed[0]}{parsed[1] or 'a'}"
    if text not in SUPPORTED_ARCHS:
        raise WideArchError(
            f"the wide low-latency kernel needs one of {', '.join(SUPPORTED_ARCHS)} "
            f"(sm_100/sm_103), got {arch}"
        )
    return text


def resolve_arch(arch: str | None = None) -> str:
    """The arch to compile for; WideArchError naming what was tried."""
    device = target_device(arch, compiling=True)
    if device.arch is None:
        raise WideArchError(
            f"no arch to compile the wide kernel for: {device.absence}, and neither "
            "FI_PATCHES_DEVICE nor CUTE_DSL_ARCH is set; pass arch='sm_103a' or 'sm_100a'"
        )
    return normalize(f"{device.arch}{device.suffix}")
