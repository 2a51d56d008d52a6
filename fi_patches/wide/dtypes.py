"""Operand, scale and output types of a block-scaled GEMM, by cutlass class name, so validity
checks run without importing cutlass; :meth:`GemmDtypes.cutlass_types` converts lazily."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WIDTHS: dict[str, int] = {
    "Float4E2M1FN": 4,
    "Float8E4M3FN": 8,
    "Float8E5M2": 8,
    "Float8E8M0FNU": 8,
    "BFloat16": 16,
    "Float16": 16,
    "Float32": 32,
}
"""Bit widths of the cutlass numeric types the kernel can see."""

OPERAND_TYPES = frozenset({"Float4E2M1FN", "Float8E4M3FN", "Float8E5M2"})
OUTPUT_TYPES = frozenset({"Float32", "Float16", "BFloat16"})


def type_name(dtype: Any) -> str:
    """The cutlass class name of ``dtype`` (a cutlass numeric class or its name)."""
    if isinstance(dtype, str):
        return dtype
    return str(getattr(dtype, "__name__", dtype))


@dataclass(frozen=True)
class GemmDtypes:
    """A (weight, activation, scale, scale-vector, output) type set. ``a`` is the weight (kernel
    A) and ``b`` the activation (kernel B), following the kernel's convention."""

    a: str = "Float8E4M3FN"
    b: str = "Float8E4M3FN"
    sf: str = "Float8E8M0FNU"
    sf_vec: int = 32
    c: str = "BFloat16"

    @classmethod
    def of(cls, a: Any, b: Any, sf: Any, sf_vec: int, c: Any) -> GemmDtypes:
        """From cutlass classes (or names), in ``can_implement``'s argument order."""
        return cls(type_name(a), type_name(b), type_name(sf), int(sf_vec), type_name(c))

    @property
    def a_width(self) -> int:
        return WIDTHS.get(self.a, 0)

    @property
    def b_width(self) -> int:
        return WIDTHS.get(self.b, 0)

    @property
    def mma_k(self) -> int:
        """K of one MMA instruction: 64 for FP4 x FP4, else 32."""
        return 64 if self.a_width == self.b_width == 4 else 32

    @property
    def is_nvfp4(self) -> bool:
        return self.sf == "Float8E4M3FN"

    @property
    def is_mx(self) -> bool:
        return self.sf_vec == 32

    def smem_bytes_per_element(self) -> tuple[float, float]:
        """Shared-memory bytes per A and B element: mixed widths put the sub-byte operand in a
        one-byte container."""
        mixed = self.a_width != self.b_width
        a_bits = 8 if mixed and self.a_width < 8 else self.a_width
        b_bits = 8 if mixed and self.b_width < 8 else self.b_width
        return a_bits / 8, b_bits / 8

    def problem(self) -> str | None:
        """Why the kernel cannot use this type set (the base ``can_implement``'s rules), or None."""
        if self.a not in OPERAND_TYPES or self.b not in OPERAND_TYPES:
            return f"operands {self.a} x {self.b} are not FP4/FP8 ({sorted(OPERAND_TYPES)})"
        if self.c not in OUTPUT_TYPES:
            return f"output type {self.c} is not one of {sorted(OUTPUT_TYPES)}"
        if self.is_nvfp4:
            if not (self.sf_vec == 16 and self.a == self.b == "Float4E2M1FN"):
                return "E4M3 scales (NVFP4) need FP4 x FP4 operands and scale vector 16"
        elif self.sf == "Float8E8M0FNU":
            if self.sf_vec != 32:
                return f"E8M0 scales (MX) need scale vector 32, got {self.sf_vec}"
        else:
            return f"scale type {self.sf} is neither Float8E8M0FNU (MX) nor Float8E4M3FN (NVFP4)"
        return None

    def cutlass_types(self) -> tuple[Any, Any, Any, int, Any]:
        """``(a, b, sf, sf_vec, c)`` as the DSL's classes (imports cutlass, through the
        boundary)."""
        from fi_patches.internals.cute_dsl import numeric_type

        return (
            numeric_type(self.a),
            numeric_type(self.b),
            numeric_type(self.sf),
            self.sf_vec,
            numeric_type(self.c),
        )


MXFP8 = GemmDtypes()
"""E4M3 x E4M3 with E8M0 scales per 32 and BF16 output: what ``mm_mxfp8`` runs."""

NVFP4 = GemmDtypes("Float4E2M1FN", "Float4E2M1FN", "Float8E4M3FN", 16, "BFloat16")
"""E2M1 x E2M1 with E4M3 scales per 16 and BF16 output."""
