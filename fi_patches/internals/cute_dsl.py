"""What the wide-tile kernel and its FlashInfer base class use from the CuTe DSL
(``nvidia-cutlass-dsl``), named once with probes: the DSL's allocators and capacity queries
that FlashInfer's low-latency kernel calls while fi_patches' subclass compiles, and the
runtime pieces ``fi_patches.wide`` builds its launch arguments from.

nvidia-cutlass-dsl 4.8.0 and 4.8.1 mark ``cutlass.utils.get_smem_capacity_in_bytes``,
``get_num_tmem_alloc_cols`` and ``SmemAllocator`` deprecated ("will be removed"); their probes
still pass while they work, and the compat layer states the deprecation in the feature's reason
(:meth:`fi_patches.internals.Internal.deprecation`). The DSL counts as part of FlashInfer, which
compiles with it, so these internals are judged with FlashInfer's release.
"""

from __future__ import annotations

from typing import Any

from fi_patches.internals._declare import CALLABLE, CLASS, Declared, Internal
from fi_patches.internals.names import WIDE_TILE

DISTRIBUTION = "nvidia-cutlass-dsl"

CAPACITY_ARCH = "sm_100"
"""The arch FlashInfer's low-latency module asks the DSL's shared-memory capacity of."""


def _check_capacity(fn: Any) -> str | None:
    found = fn(CAPACITY_ARCH)
    if isinstance(found, bool) or not isinstance(found, int) or found <= 0:
        return f"returned {found!r} for {CAPACITY_ARCH}, not a positive byte count"
    return None


SMEM_CAPACITY = Internal(
    "dsl_smem_capacity",
    CALLABLE,
    "cutlass.utils",
    "get_smem_capacity_in_bytes",
    (WIDE_TILE,),
    check=_check_capacity,
)
"""Read at import by FlashInfer's low-latency module and by :mod:`fi_patches.wide.budget`."""

TMEM_ALLOC_COLS = Internal(
    "dsl_num_tmem_alloc_cols", CALLABLE, "cutlass.utils", "get_num_tmem_alloc_cols", (WIDE_TILE,)
)
"""Called by the kernel's ``__init__`` path while the subclass compiles (needs a layout)."""

SMEM_ALLOCATOR = Internal(
    "dsl_smem_allocator", CLASS, "cutlass.utils", "SmemAllocator", (WIDE_TILE,)
)
"""Built by the kernel body the subclass compiles."""

MAKE_PTR = Internal("dsl_make_ptr", CALLABLE, "cutlass.cute.runtime", "make_ptr", (WIDE_TILE,))
"""The placeholder and launch pointers of :mod:`fi_patches.wide.compile` and ``launch``."""

ADDRESS_SPACE = Internal("dsl_address_space", CLASS, "cutlass.cute", "AddressSpace", (WIDE_TILE,))
"""The enum of the address space those pointers are in (its ``gmem`` member; an enum member
cannot be removed on its own, so the class is what a release could drop)."""

INT32 = Internal("dsl_int32", CLASS, "cutlass", "Int32", (WIDE_TILE,))
"""The problem-size scalars the compiled kernel takes."""

INTERNALS: tuple[Declared, ...] = (
    SMEM_CAPACITY,
    TMEM_ALLOC_COLS,
    SMEM_ALLOCATOR,
    MAKE_PTR,
    ADDRESS_SPACE,
    INT32,
)
