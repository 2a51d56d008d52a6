"""Which GPU arch a wide kernel is compiled for: given, else the current CUDA device's, else
``CUTE_DSL_ARCH``, else ``FI_PATCHES_DEVICE``. The DSL embeds only SASS for that exact arch (no
PTX), so a kernel built for sm_100a does not load on sm_103 and vice versa."""

from __future__ import annotations

import os
import re

SUPPORTED_ARCHS = ("sm_100a", "sm_100f", "sm_103a")
"""Targets the kernel's block-scaled MMA accepts among the Blackwell datacenter parts."""

CUTE_DSL_ARCH_ENV = "CUTE_DSL_ARCH"
DEVICE_ENV = "FI_PATCHES_DEVICE"

_ARCH = re.compile(r"^sm_?(\d{2,3})([af]?)$")


class WideArchError(RuntimeError):
    """No arch to compile for, or one the wide kernel does not support."""


def normalize(arch: str) -> str:
    """``sm_103``, ``sm103``, ``SM_103A`` -> ``sm_103a`` (a bare arch gets the ``a`` suffix the
    tcgen05 instructions need); WideArchError when unsupported."""
    match = _ARCH.match(arch.strip().lower())
    if match is None:
        raise WideArchError(f"{arch!r} is not a GPU arch such as sm_103a")
    text = f"sm_{match.group(1)}{match.group(2) or 'a'}"
    if text not in SUPPORTED_ARCHS:
        raise WideArchError(
            f"the wide low-latency kernel needs one of {', '.join(SUPPORTED_ARCHS)} "
            f"(sm_100/sm_103), got {arch}"
        )
    return text


def device_arch() -> str | None:
    """``sm_XYa`` of the current CUDA device, or None when torch sees none."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    except Exception:
        return None
    return f"sm_{major}{minor}a"


def resolve_arch(arch: str | None = None) -> str:
    """The arch to compile for (see the module docstring); WideArchError naming what was tried."""
    if arch:
        return normalize(arch)
    found = device_arch()
    if found is not None:
        return normalize(found)
    for env in (CUTE_DSL_ARCH_ENV, DEVICE_ENV):
        value = os.environ.get(env)
        if value:
            return normalize(value)
    raise WideArchError(
        "no arch to compile the wide kernel for: there is no CUDA device and neither "
        f"{CUTE_DSL_ARCH_ENV} nor {DEVICE_ENV} is set; pass arch='sm_103a' or 'sm_100a'"
    )
