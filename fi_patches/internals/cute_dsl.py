"""What fi_patches uses from the CuTe DSL (``nvidia-cutlass-dsl``, imported as ``cutlass``),
named once with probes: the DSL's allocators and capacity queries that FlashInfer's low-latency
kernel calls while fi_patches' subclass compiles, the compiler, the numeric types and runtime
pieces ``fi_patches.wide`` builds its compile and launch arguments from, and the CUDA stream
type the launch passes. Outside the boundary only the kernel module itself
(``fi_patches/wide/kernel.py``, CuTe DSL code) imports the DSL; every other module reaches it
through the accessors below (``tests/test_boundary.py`` holds that).

nvidia-cutlass-dsl 4.8.0 and 4.8.1 mark ``cutlass.utils.get_smem_capacity_in_bytes``,
``get_num_tmem_alloc_cols`` and ``SmemAllocator`` deprecated ("will be removed"); their probes
still pass while they work, and the compat layer states the deprecation in the feature's reason
(:meth:`fi_patches.internals.Internal.deprecation`). The DSL is a dependency of its own
(:data:`CUTE_DSL`): the features that compile or run CuTe DSL kernels are verified on the DSL
releases a compat matrix cell ran, as on FlashInfer's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fi_patches.internals import (
    CALLABLE,
    CLASS,
    CUTE_DSL,
    PINNED_CUTE_DSL,
    PINNED_TACTICS,
    WIDE_TILE,
    Declared,
    Internal,
    InternalError,
)
from fi_patches.internals import CUTE_DSL_DISTRIBUTION as DISTRIBUTION

__all__ = ["CUTE_DSL", "DISTRIBUTION"]

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
"""Read at import by FlashInfer's low-latency module (deprecated from 4.8.0); the wide budget
reads it only where the DSL lacks :data:`MEMORY_SMEM_CAPACITY`."""

MEMORY_SMEM_CAPACITY = Internal(
    "dsl_memory_smem_capacity",
    CALLABLE,
    "cutlass.memory",
    "get_smem_capacity_in_bytes",
    (WIDE_TILE,),
    check=_check_capacity,
    optional=True,
)
"""The non-deprecated replacement, which the wide budget prefers (:func:`smem_capacity_query`)."""

TMEM_ALLOC_COLS = Internal(
    "dsl_num_tmem_alloc_cols", CALLABLE, "cutlass.utils", "get_num_tmem_alloc_cols", (WIDE_TILE,)
)
"""Called by the kernel's ``__init__`` path while the subclass compiles (needs a layout)."""

SMEM_ALLOCATOR = Internal(
    "dsl_smem_allocator", CLASS, "cutlass.utils", "SmemAllocator", (WIDE_TILE,)
)
"""Built by the kernel body the subclass compiles."""

MAKE_PTR = Internal("dsl_make_ptr", CALLABLE, "cutlass.cute.runtime", "make_ptr", (WIDE_TILE,))
"""The placeholder and launch pointers of :mod:`fi_patches.wide.kernel` and ``launch``."""

ADDRESS_SPACE = Internal("dsl_address_space", CLASS, "cutlass.cute", "AddressSpace", (WIDE_TILE,))
"""The enum of the address space those pointers are in (its ``gmem`` member; an enum member
cannot be removed on its own, so the class is what a release could drop)."""

COMPILE = Internal("cute_compile", CALLABLE, "cutlass.cute", "compile", (WIDE_TILE,))
"""Compiles the wide kernel (:mod:`fi_patches.wide.kernel`)."""

FAKE_STREAM = Internal(
    "cute_make_fake_stream", CALLABLE, "cutlass.cute.runtime", "make_fake_stream", (WIDE_TILE,)
)
"""The stream placeholder a compile takes."""

CU_STREAM = Internal("cuda_stream", CLASS, "cuda.bindings.driver", "CUstream", (WIDE_TILE,))
"""The CUDA driver's stream type a compiled DSL kernel is launched on (``cuda-python``, which
the DSL runs on)."""

NUMERIC_TYPE_USERS: dict[str, tuple[str, ...]] = {
    "Int32": (WIDE_TILE,),
    "Float32": (WIDE_TILE,),
    "BFloat16": (PINNED_TACTICS, WIDE_TILE),
    "Float8E4M3FN": (PINNED_TACTICS, PINNED_CUTE_DSL, WIDE_TILE),
    "Float8E8M0FNU": (PINNED_TACTICS, PINNED_CUTE_DSL, WIDE_TILE),
    "Float4E2M1FN": (PINNED_CUTE_DSL,),
    "Float16": (),
    "Float8E5M2": (),
}
"""The DSL numeric types fi_patches names, and the features that need each: the wide tile's
problem scalars and accumulator, and MXFP8's operand, scale and output types, which the
low-latency enumerator and the split-K predicate are asked about too (and which FlashInfer's
cute-dsl runner names while it lists tactics, FP4 included). The others are types a
block-scaled type set may name; no feature runs them."""

NUMERIC_TYPES: tuple[Internal, ...] = tuple(
    Internal(f"dsl_{name.lower()}", CLASS, "cutlass", name, users)
    for name, users in NUMERIC_TYPE_USERS.items()
)
"""One declaration per numeric type (``dsl_int32``, ``dsl_float8e4m3fn``, ...)."""

INTERNALS: tuple[Declared, ...] = (
    SMEM_CAPACITY,
    MEMORY_SMEM_CAPACITY,
    TMEM_ALLOC_COLS,
    SMEM_ALLOCATOR,
    MAKE_PTR,
    ADDRESS_SPACE,
    COMPILE,
    FAKE_STREAM,
    CU_STREAM,
    *NUMERIC_TYPES,
)


# accessors ------------------------------------------------------------------------------------


def smem_capacity_query() -> Callable[[str], int]:
    """The DSL's shared-memory capacity query (``arch -> bytes``): ``cutlass.memory``'s where
    the DSL has it, else the deprecated ``cutlass.utils`` one; :class:`InternalError` naming
    both when neither is there."""
    for internal in (MEMORY_SMEM_CAPACITY, SMEM_CAPACITY):
        if internal.present():
            query: Callable[[str], int] = internal.resolve()
            return query
    raise InternalError(f"neither {MEMORY_SMEM_CAPACITY.path} nor {SMEM_CAPACITY.path} is there")


def numeric_type(name: str) -> Any:
    """The DSL's numeric type ``name`` (``Float8E4M3FN``, ``Int32``, ...); :class:`InternalError`
    for a name the boundary does not declare."""
    for internal in NUMERIC_TYPES:
        if internal.attr == name:
            return internal.resolve()
    raise InternalError(f"cutlass.{name} is not a numeric type the boundary declares")


def make_ptr() -> Callable[..., Any]:
    """``cutlass.cute.runtime.make_ptr``: a typed pointer for a compile or a launch."""
    fn: Callable[..., Any] = MAKE_PTR.resolve()
    return fn


def gmem() -> Any:
    """The global-memory member of the DSL's ``AddressSpace``."""
    return ADDRESS_SPACE.resolve().gmem


def compiler() -> Callable[..., Any]:
    """``cutlass.cute.compile``."""
    fn: Callable[..., Any] = COMPILE.resolve()
    return fn


def fake_stream() -> Any:
    """A placeholder stream for a compile."""
    return FAKE_STREAM.resolve()()


def cu_stream() -> type:
    """The CUDA driver's ``CUstream`` type."""
    cls: type = CU_STREAM.resolve()
    return cls
