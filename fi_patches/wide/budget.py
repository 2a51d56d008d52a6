"""What a wide configuration is and whether it fits: the GEMM's types, the target arch, and the
kernel's hardware budget.

Operand, scale and output types of a block-scaled GEMM, by cutlass class name, so validity
checks run without importing cutlass; :meth:`GemmDtypes.cutlass_types` converts lazily.

The GPU arch a wide kernel is compiled for (:func:`resolve_arch`) follows the one rule of
:mod:`fi_patches.compat.target` (explicit, ``FI_PATCHES_DEVICE``, the CUDA device, then
``CUTE_DSL_ARCH``). The DSL embeds only SASS for that exact arch (no PTX), so a kernel built for
sm_100a does not load on sm_103 and vice versa.

The hardware budget: the limits of the CTA tile, the shared memory and TMEM a
configuration needs, and the validity check that names the limit a configuration breaks. The
DSL compiles over-budget shared memory and fails only at launch, so this is checked first.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.target import normalize_arch, parse_arch, target_device
from fi_patches.pins.schema import WIDE_MAX_TILE

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


CTA_M = 128
"""The kernel's M tile (weight rows, i.e. output features per CTA); the only one it supports."""

MIN_TILE = 8
"""Narrowest activation tile: FlashInfer's stock tile."""

MAX_TILE = WIDE_MAX_TILE
"""Widest activation tile (:data:`fi_patches.pins.schema.WIDE_MAX_TILE`)."""

TILE_STEP = 8
"""The block-scaled MMA needs N to be a multiple of 8."""

MAX_AB_STAGES = 12
"""Most A/B shared-memory pipeline stages the kernel accepts (``_MAX_AB_STAGES``)."""

SUPPORTED_SPLIT_K = (1, 2, 4, 8)
"""Cluster split-K factors the kernel supports (``_SUPPORTED_SPLIT_K``)."""

TMEM_COLUMNS = 256
"""TMEM columns the kernel allocates (half of the 512 of an SM), so its budget."""

SMEM_CAPACITY_FALLBACK = 232448
"""Dynamic shared memory per block on sm_100/sm_103 ((228 - 1) KiB), used when cutlass is absent."""

MX_CTA_K_MULTIPLE = 128
"""MX (vec-32) TMA layouts are built from four 32-wide MMA-K atoms: cta_k must be a multiple."""

SF_ATOM_ROWS = 128
"""Rows of one scale-factor atom (32 x 4) of the standard 128x4 swizzled layout."""

SF_ATOM_COLS = 4
"""Scale-factor columns (K blocks) of one atom of the standard 128x4 swizzled layout."""


EPILOGUE_THREADS = 128
"""Threads that share a CTA's accumulator (and the split-K mailbox)."""


def tmem_columns(
    tile: int,
    cta_k: int,
    sfb_tmem_stages: int = 1,
    dtypes: GemmDtypes = MXFP8,
    *,
    sfb_tmem_store: bool = False,
    cta_m: int = CTA_M,
) -> int:
    """Columns needed: ``tile`` FP32 accumulator columns, ``cta_m / 32`` SFA columns per MMA-K
    step, and per SFB stage 4 columns per MMA-K step (2 on the register-mediated path)."""
    mma_steps = cta_k // dtypes.mma_k
    sfa = (cta_m // 32) * mma_steps
    sfb_per_stage = mma_steps * (2 if sfb_tmem_store else 4)
    return tile + sfa + sfb_per_stage * sfb_tmem_stages


logger = get_logger(__name__)


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def mailbox_elements(tile: int, split_k: int, cta_m: int = CTA_M) -> int:
    """FP32 elements of the split-K mailbox: each of the ``split_k - 1`` sending CTAs ships its
    shard of every epilogue thread's accumulator values."""
    per_thread = cta_m * tile // EPILOGUE_THREADS
    return max(split_k - 1, 0) * EPILOGUE_THREADS * (per_thread // max(split_k, 1))


def smem_bytes(
    tile: int,
    cta_k: int,
    ab_stages: int,
    sfb_tmem_stages: int = 1,
    split_k: int = 1,
    dtypes: GemmDtypes = MXFP8,
    cta_m: int = CTA_M,
) -> int:
    """Bytes of dynamic shared memory one CTA of the kernel allocates for ``tile`` activation
    rows and the tactic ``(cta_k, ab_stages, sfb_tmem_stages, split_k)``."""
    # mbarriers: A/B full+empty per stage, SFB per TMEM stage, MMA->epilogue pair, TMEM
    # allocation, bias load; then the 4-byte TMEM base pointer.
    cursor = 16 * ab_stages + 16 * sfb_tmem_stages + 16 + 8 + 8 + 4
    # split-K mailbox barrier and its FP32 payload
    cursor = _align(cursor, 8) + 8 + 4 * mailbox_elements(tile, split_k, cta_m)
    a_bytes, b_bytes = dtypes.smem_bytes_per_element()
    sf_k = cta_k // dtypes.sf_vec
    sfb_padded_rows = _align(tile, SF_ATOM_ROWS)
    buffers = (
        int(cta_m * cta_k * a_bytes) * ab_stages,  # A (weight)
        int(tile * cta_k * b_bytes) * ab_stages,  # B (activation)
        cta_m * sf_k * ab_stages,  # SFA
        tile * sf_k * ab_stages,  # compact SFB (allocated on every path)
        sfb_padded_rows * sf_k * ab_stages,  # SFB padded to a whole 128-row atom
    )
    for size in buffers:
        cursor = _align(cursor, 128) + size
    return cursor


def arch_family(arch: str) -> str:
    """``sm_103a`` / ``sm_103f`` / ``sm103`` -> ``sm_103``; ValueError when not an arch."""
    family = normalize_arch(arch)
    if family is None:
        raise ValueError(f"{arch!r} is not a GPU arch such as sm_103a")
    return family


@functools.cache
def smem_capacity(arch: str = "sm_100") -> int:
    """Dynamic shared memory one block may request on ``arch`` (as the DSL checks it at launch),
    read from the DSL's capacity query (``cutlass.memory``'s, else the deprecated
    ``cutlass.utils`` one: :func:`fi_patches.internals.cute_dsl.smem_capacity_query`);
    :data:`SMEM_CAPACITY_FALLBACK` where the DSL is absent or the query fails, logged once."""
    from fi_patches._text import error_text
    from fi_patches.internals import InternalError
    from fi_patches.internals.cute_dsl import smem_capacity_query

    family = arch_family(arch)
    try:
        return int(smem_capacity_query()(family))
    except Exception as exc:
        absent = isinstance(exc, InternalError)
        log_once(
            logger,
            logging.INFO if absent else logging.WARNING,
            f"smem_capacity:{family}",
            "shared-memory capacity of %s: the CuTe DSL's query %s (%s); using %d B",
            family,
            "is not there" if absent else "failed",
            error_text(exc),
            SMEM_CAPACITY_FALLBACK,
        )
        return SMEM_CAPACITY_FALLBACK


DEFAULT_CAPACITY_ARCH = "sm_100"
"""Capacity checked when no arch is given: FlashInfer checks sm_100's (sm_103's is equal)."""


def tile_reason(tile: int, *, cta_m: int = CTA_M) -> str | None:
    """Why ``(cta_m, tile)`` is not a tile the kernel body supports, or None."""
    if cta_m != CTA_M:
        return f"cta_m must be {CTA_M}, got {cta_m}"
    if tile % TILE_STEP or not MIN_TILE <= tile <= MAX_TILE:
        return (
            f"tile must be a multiple of {TILE_STEP} in [{MIN_TILE}, {MAX_TILE}], got {tile} "
            f"(the MMA needs N % 8 == 0; one 128-row scale atom per tile caps it at {MAX_TILE})"
        )
    return None


def config_reason(
    tile: int,
    tactic: Sequence[int],
    dtypes: GemmDtypes = MXFP8,
    *,
    cta_m: int = CTA_M,
    sfb_tmem_store: bool = False,
    arch: str | None = None,
) -> str | None:
    """Why the kernel cannot be built for ``tile`` and ``tactic`` whatever the problem (types,
    tile, cta_k, stages, split-K, TMEM and shared memory), or None."""
    reason = dtypes.problem()
    if reason is not None:
        return reason
    if len(tactic) != 4:
        return f"a tactic is (cta_k, ab_stages, sfb_tmem_stages, split_k), got {tuple(tactic)}"
    cta_k, stages, sfb_stages, split_k = (int(v) for v in tactic)
    if sfb_tmem_store:
        if not dtypes.is_nvfp4:
            return "sfb_tmem_store (register-mediated SFB staging) is NVFP4-only"
        if tile != MIN_TILE:
            return (
                "sfb_tmem_store (register-mediated SFB staging) is not supported for wide "
                f"tiles (only the stock {MIN_TILE}-row tile); use the direct SFB path"
            )
    reason = tile_reason(tile, cta_m=cta_m)
    if reason is not None:
        return reason
    mma_k = dtypes.mma_k
    if cta_k <= 0 or cta_k % mma_k:
        return f"cta_k must be a positive multiple of the MMA K ({mma_k}), got {cta_k}"
    if dtypes.is_mx and cta_k % MX_CTA_K_MULTIPLE:
        return (
            f"cta_k must be a multiple of {MX_CTA_K_MULTIPLE} for MX scales (four 32-wide "
            f"MMA-K atoms per TMA box), got {cta_k}"
        )
    if not 1 <= stages <= MAX_AB_STAGES:
        return f"ab_stages must be in [1, {MAX_AB_STAGES}], got {stages}"
    if sfb_stages < 1:
        return f"sfb_tmem_stages must be at least 1, got {sfb_stages}"
    if split_k not in SUPPORTED_SPLIT_K:
        return f"split_k must be one of {SUPPORTED_SPLIT_K}, got {split_k}"
    per_thread = cta_m * tile // EPILOGUE_THREADS
    if per_thread % split_k:
        return (
            f"split_k {split_k} must divide the {per_thread} accumulator values per "
            "epilogue thread (the split-K mailbox shards)"
        )
    columns = tmem_columns(tile, cta_k, sfb_stages, dtypes, sfb_tmem_store=sfb_tmem_store)
    if columns > TMEM_COLUMNS:
        return (
            f"needs {columns} TMEM columns of {TMEM_COLUMNS} "
            f"(accumulator {tile} + scales {columns - tile} for cta_k {cta_k}, "
            f"{sfb_stages} SFB stage(s))"
        )
    family = arch_family(arch or DEFAULT_CAPACITY_ARCH)
    need = smem_bytes(tile, cta_k, stages, sfb_stages, split_k, dtypes, cta_m)
    capacity = smem_capacity(family)
    if need > capacity:
        return f"needs {need} B of shared memory; {family} allows {capacity} B"
    return None


def invalid_reason(
    problem_mnkl: Sequence[int],
    tile: int,
    tactic: Sequence[int],
    dtypes: GemmDtypes = MXFP8,
    *,
    cta_m: int = CTA_M,
    sfb_tmem_store: bool = False,
    sfb_per_cta_packed: bool = False,
    arch: str | None = None,
) -> str | None:
    """Why the kernel cannot run ``problem_mnkl`` = (weight N, activation rows, K, L) with
    ``tile`` and ``tactic``, or None when it can.

    Standard 128x4 activation scales match the kernel's per-CTA SFB layout only when all rows
    fit one tile (see :mod:`fi_patches.wide.launch`); ``sfb_per_cta_packed`` says they were
    repacked per CTA.
    """
    if len(problem_mnkl) != 4:
        return f"a problem is (M, N, K, L), got {tuple(problem_mnkl)}"
    m, n, k, batch = (int(v) for v in problem_mnkl)
    if min(m, n, k, batch) <= 0:
        return f"problem (M, N, K, L) = {(m, n, k, batch)} must be positive"
    reason = config_reason(
        tile, tactic, dtypes, cta_m=cta_m, sfb_tmem_store=sfb_tmem_store, arch=arch
    )
    if reason is not None:
        return reason
    cta_k = int(tactic[0])
    if k % cta_k:
        return f"K {k} is not a multiple of cta_k {cta_k}"
    if n > tile and not sfb_tmem_store and not sfb_per_cta_packed:
        return (
            f"{n} activation rows exceed the {tile}-row tile: standard 128x4 activation "
            "scales match the kernel's per-CTA SFB layout only within one tile; use a tile "
            f">= {n} or repack the scales per CTA"
        )
    return None
