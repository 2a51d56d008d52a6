"""Run a compiled wide kernel on torch tensors: the activation-scale layouts it reads, the checks
on its inputs, the launch on the current CUDA stream, and ``wide_mm``, which takes its inputs
exactly as ``flashinfer.mm_mxfp8`` does.

Activation scales: FlashInfer's standard 1-D swizzled 128x4 layout (what
``mxfp8_quantize(..., is_sf_swizzled_layout=True)`` produces) and the per-CTA layout the kernel
reads, where each ``tile``-row block of rows gets its own 128-row atom, are byte-identical when
all rows fit one tile; otherwise :func:`repack_per_cta` repacks them.

Kernel convention: kernel M is the weight's N (output features), kernel N the activation rows;
A = weight ``(N, K)`` K-major with its 128x4 swizzled scales (SFA), B = activation ``(rows, K)``
K-major with its scales (SFB), C = ``out.T`` (M-major), so ``out`` is ``(rows, N)`` row-major.

The same launches serve a FlashInfer ``TunableRunner`` for the wide kernel
(:func:`runner_class`), so ``flashinfer.autotune()`` and ``AutoTuner.choose_one`` tune wide
tiles like any FlashInfer op, on ``mm_mxfp8``'s inputs.

Its tactics are ``(tile, cta_k, ab_stages, sfb_tmem_stages, split_k)``: the tile travels with
the tactic, so a cached winner is self-describing. It offers tactics for more than 8 and at
most ``max_rows`` rows, and ``validate_tactic`` (FlashInfer's runner contract) turns a cached
too-narrow tactic into a cache miss. ``[[wide]]`` pins narrow it as any pinned runner is
narrowed, through the engine (the section's specialization maps rows to this runner's tile).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.pins.schema import LOW_LATENCY_MAX_ROWS, WIDE_OP, WIDE_RUNNER
from fi_patches.wide.budget import SF_ATOM_COLS, SF_ATOM_ROWS, invalid_reason, resolve_arch
from fi_patches.wide.kernel import POINTER_ALIGN, WideConfigError, WideKernel, compile_wide
from fi_patches.wide.tactics import (
    TILE_ROUNDING,
    WIDE_MAX_ROWS,
    choose_tactic,
    pick_tile,
    wide_tactics,
)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def sf_columns(k: int, sf_vec: int = 32) -> int:
    """Scale columns per row, padded to whole 4-column atoms."""
    return _ceil_div(_ceil_div(k, sf_vec), SF_ATOM_COLS) * SF_ATOM_COLS


def standard_scale_elements(rows: int, k: int, sf_vec: int = 32) -> int:
    """Elements of the standard 128x4 swizzled scales of ``rows`` rows."""
    return _ceil_div(rows, SF_ATOM_ROWS) * SF_ATOM_ROWS * sf_columns(k, sf_vec)


def per_cta_scale_elements(rows: int, k: int, tile: int, sf_vec: int = 32) -> int:
    """Elements the kernel reads for ``rows`` activation rows at ``tile``: one 128-row atom
    per tile."""
    return _ceil_div(rows, tile) * SF_ATOM_ROWS * sf_columns(k, sf_vec)


def unswizzle(scales: Any, rows: int, k: int, sf_vec: int = 32) -> Any:
    """The ``(rows, ceil(k / sf_vec))`` row-major matrix held by standard swizzled scales.

    Element ``(r, c)`` sits at ``((r // 128 * atoms_k + c // 4) * 32 + r % 32) * 16
    + (r // 32 % 4) * 4 + c % 4``.
    """
    atoms_mn = _ceil_div(rows, SF_ATOM_ROWS)
    atoms_k = sf_columns(k, sf_vec) // SF_ATOM_COLS
    flat = scales.reshape(-1)[: standard_scale_elements(rows, k, sf_vec)]
    grid = flat.view(atoms_mn, atoms_k, 32, 4, SF_ATOM_COLS).permute(0, 3, 2, 1, 4)
    matrix = grid.reshape(atoms_mn * SF_ATOM_ROWS, atoms_k * SF_ATOM_COLS)
    return matrix[:rows, : _ceil_div(k, sf_vec)]


def repack_per_cta(scales: Any, rows: int, k: int, tile: int, sf_vec: int = 32) -> Any:
    """Standard swizzled activation scales repacked into the kernel's per-CTA layout (1-D,
    :func:`per_cta_scale_elements` long) with FlashInfer's ``reorder_scale_factors_per_cta``."""
    from fi_patches.internals import flashinfer as fi

    reorder_scale_factors_per_cta = fi.reorder_scale_factors_per_cta()
    raw = scales.view(_byte_dtype()) if scales.element_size() == 1 else scales
    matrix = unswizzle(raw, rows, k, sf_vec).unsqueeze(-1)
    packed = reorder_scale_factors_per_cta(matrix, tile, k, sf_vec)
    packed = packed.reshape(-1).contiguous()
    return packed.view(scales.dtype) if packed.dtype != scales.dtype else packed


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


FP8_TORCH = "float8_e4m3fn"
SCALE_TORCH = ("uint8", "float8_e8m0fnu")
OUT_TORCH = {"BFloat16": "bfloat16", "Float16": "float16", "Float32": "float32"}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


_runtime: list[Any] = []
"""``[torch, CUstream, make_ptr, gmem, Int32]`` once imported (through the boundary): an
import statement per launch costs more than the checks."""


def _launch_runtime() -> list[Any]:
    if not _runtime:
        import torch

        from fi_patches.internals import cute_dsl

        _runtime[:] = [
            torch,
            cute_dsl.cu_stream(),
            cute_dsl.make_ptr(),
            cute_dsl.gmem(),
            cute_dsl.numeric_type("Int32"),
        ]
    return _runtime


class LaunchPlan:
    """A compiled wide kernel on one problem shape ``(N, rows, K)``. What the shape decides
    (the tile contract, the scale sizes, the kernel's integer arguments) is checked once when
    the plan is made; :meth:`run` checks what each call's tensors can change (their shapes,
    types, layouts, devices and alignment) and launches."""

    __slots__ = (
        "_args",
        "_dtypes",
        "_types",
        "k",
        "kernel",
        "n",
        "need_a",
        "need_w",
        "out_dtype",
        "rows",
    )

    def __init__(self, kernel: WideKernel, n: int, rows: int, k: int, per_cta: bool) -> None:
        import torch

        _require(kernel.key.dtypes.sf_vec == 32, "launch_wide runs MXFP8 kernels only")
        reason = invalid_reason(
            (n, rows, k, 1),
            kernel.tile,
            kernel.tactic,
            kernel.key.dtypes,
            sfb_per_cta_packed=per_cta,
            arch=kernel.arch,
        )
        if reason is not None:
            raise WideConfigError(f"{kernel.key} cannot run N={n} rows={rows} K={k}: {reason}")
        self.kernel, self.n, self.rows, self.k = kernel, n, rows, k
        self.need_w = standard_scale_elements(n, k)
        self.need_a = (
            per_cta_scale_elements(rows, k, kernel.tile)
            if per_cta
            else standard_scale_elements(rows, k)
        )
        self.out_dtype = getattr(torch, OUT_TORCH[kernel.key.dtypes.c])
        # (fp8, scale types): dtype objects, compared per call (their names cost more).
        self._dtypes = (
            getattr(torch, FP8_TORCH),
            tuple(getattr(torch, name) for name in SCALE_TORCH),
        )
        self._types: tuple[Any, ...] = ()
        self._args: tuple[Any, ...] = ()

    def check(self, weight: Any, weight_scale: Any, a: Any, a_scale: Any, out: Any) -> None:
        """Raise ValueError naming the first input this plan cannot run; ``weight`` is the
        ``(N, K)`` row-major weight."""
        _require(
            tuple(weight.shape) == (self.n, self.k) and weight.is_contiguous(),
            f"weight must be row-major (K-major) contiguous (N, K) = {(self.n, self.k)}",
        )
        self._check_rest(weight, weight_scale, a, a_scale, out)

    def _check_rest(self, weight: Any, weight_scale: Any, a: Any, a_scale: Any, out: Any) -> None:
        _require(
            tuple(a.shape) == (self.rows, self.k), f"a must be (rows, K) = {self.rows, self.k}"
        )
        fp8, scale_types = self._dtypes
        for name, tensor in (("weight", weight), ("a", a)):
            _require(tensor.dtype == fp8, f"{name} must be {FP8_TORCH}")
        _require(a.is_contiguous(), "a must be row-major (K-major) contiguous")
        for name, tensor in (("weight_scale", weight_scale), ("a_scale", a_scale)):
            _require(tensor.dtype in scale_types, f"{name} must be one of {SCALE_TORCH}")
            _require(tensor.is_contiguous(), f"{name} must be contiguous")
        out_name = OUT_TORCH[self.kernel.key.dtypes.c]
        _require(out.dtype == self.out_dtype, f"out must be {out_name} for this kernel")
        _require(
            tuple(out.shape) == (self.rows, self.n),
            f"out must be (rows, N) = {(self.rows, self.n)}",
        )
        _require(out.is_contiguous(), "out must be contiguous (C = out.T is M-major)")
        _require(weight_scale.numel() >= self.need_w, f"weight_scale needs {self.need_w} elements")
        _require(a_scale.numel() >= self.need_a, f"a_scale needs {self.need_a} elements")
        device = weight.device
        others = (("weight_scale", weight_scale), ("a", a), ("a_scale", a_scale), ("out", out))
        for name, tensor in others:
            _require(tensor.device == device, f"{name} is on {tensor.device}, weight on {device}")
        _require(device.type == "cuda", "wide kernels run on CUDA tensors")
        aligned = (
            ("weight", weight, POINTER_ALIGN["a"]),
            ("weight_scale", weight_scale, POINTER_ALIGN["sfa"]),
            ("a", a, POINTER_ALIGN["b"]),
            ("a_scale", a_scale, POINTER_ALIGN["sfb"]),
            ("out", out, POINTER_ALIGN["c"]),
        )
        for name, tensor, align in aligned:
            _require(tensor.data_ptr() % align == 0, f"{name} must be {align}-byte aligned")

    def run(self, weight: Any, weight_scale: Any, a: Any, a_scale: Any, out: Any) -> Any:
        """Check the tensors and launch ``out = a @ weight.T`` on the current stream, with
        ``weight`` the ``(N, K)`` row-major weight; returns ``out``."""
        self.check(weight, weight_scale, a, a_scale, out)
        return self._launch(weight, weight_scale, a, a_scale, out)

    def run_column_major(
        self, weight_kn: Any, weight_scale: Any, a: Any, a_scale: Any, out: Any
    ) -> Any:
        """:meth:`run` with the weight as ``mm_mxfp8`` takes it: the ``(K, N)`` column-major
        view ``w.t()`` of the row-major ``(N, K)`` weight (the same memory, no transpose)."""
        _require(
            tuple(weight_kn.shape) == (self.k, self.n) and weight_kn.stride() == (1, self.k),
            f"weight must be the column-major (K, N) = {(self.k, self.n)} view w.t() of a "
            "row-major (N, K) tensor",
        )
        self._check_rest(weight_kn, weight_scale, a, a_scale, out)
        return self._launch(weight_kn, weight_scale, a, a_scale, out)

    def _launch(self, weight: Any, weight_scale: Any, a: Any, a_scale: Any, out: Any) -> Any:
        torch, cu_stream, make_ptr, gmem, int32 = _runtime or _launch_runtime()
        if not self._args:
            a_t, b_t, sf_t, _, c_t = self.kernel.key.dtypes.cutlass_types()
            self._types = (a_t, sf_t, b_t, sf_t, c_t)
            self._args = tuple(int32(v) for v in (self.n, self.rows, self.k, 1))
        pointers = (
            make_ptr(dtype, tensor.data_ptr(), gmem, assumed_align=align)
            for dtype, tensor, align in zip(
                self._types, (weight, weight_scale, a, a_scale, out), _ALIGNS, strict=True
            )
        )
        with torch.cuda.device(weight.device):
            stream = cu_stream(torch.cuda.current_stream(weight.device).cuda_stream)
            self.kernel(*pointers, None, None, self._args, stream)
        return out


_ALIGNS = tuple(POINTER_ALIGN[role] for role in ("a", "sfa", "b", "sfb", "c"))


def launch_plan(kernel: WideKernel, n: int, rows: int, k: int, per_cta: bool = False) -> LaunchPlan:
    """``kernel``'s plan for ``(N, rows, K)``, made once per shape (``per_cta``: the activation
    scales are in the per-CTA layout); raises WideConfigError when it cannot run that shape."""
    key = (n, rows, k, per_cta)
    plan = kernel.plans.get(key)
    if plan is None:
        plan = kernel.plans.setdefault(key, LaunchPlan(kernel, n, rows, k, per_cta))
    return plan  # type: ignore[no-any-return]


def _problem(weight: Any, a: Any) -> tuple[int, int, int]:
    _require(weight.dim() == 2 and a.dim() == 2, "weight is (N, K) and a is (rows, K)")
    n, k = weight.shape
    rows, k_a = a.shape
    _require(k == k_a, f"weight K {k} != activation K {k_a}")
    return n, rows, k


def check_launch_inputs(
    kernel: WideKernel,
    weight: Any,
    weight_scale: Any,
    a: Any,
    a_scale: Any,
    out: Any,
    *,
    a_scale_per_cta: bool = False,
) -> tuple[int, int, int]:
    """Validate shapes, types, layouts, alignment and the tile contract; ``(N, rows, K)``."""
    n, rows, k = _problem(weight, a)
    launch_plan(kernel, n, rows, k, a_scale_per_cta).check(weight, weight_scale, a, a_scale, out)
    return n, rows, k


def launch_wide(
    kernel: WideKernel,
    weight: Any,
    weight_scale: Any,
    a: Any,
    a_scale: Any,
    out: Any,
    *,
    a_scale_per_cta: bool = False,
) -> Any:
    """Run ``out = a @ weight.T`` (block-scaled) with ``kernel`` on the current stream; returns
    ``out``. ``a_scale_per_cta`` says ``a_scale`` is in the per-CTA layout (see
    :mod:`fi_patches.wide.launch`); otherwise it must be standard and rows <= tile."""
    n, rows, k = _problem(weight, a)
    plan = launch_plan(kernel, n, rows, k, a_scale_per_cta)
    return plan.run(weight, weight_scale, a, a_scale, out)


def wide_mm(
    a: Any,
    a_scale: Any,
    weight: Any,
    weight_scale: Any,
    *,
    tactic: Sequence[int] | None = None,
    tile: int | None = None,
    out: Any = None,
    repack_scales: bool = False,
    pdl: bool = True,
    rounding: int = TILE_ROUNDING,
    max_rows: int = WIDE_MAX_ROWS,
) -> Any:
    """``a @ weight`` in BF16 for ``a`` (rows, K) E4M3 with 1-D swizzled 128x4 E8M0 scales and
    ``weight`` the column-major (K, N) view ``w.t()`` of a row-major (N, K) E4M3 tensor with
    its 1-D swizzled scales, as ``mm_mxfp8`` takes them.

    The tile is ``rows`` rounded up to ``rounding`` unless given; the tactic is ``tactic``, else
    a ``[[wide]]`` pin, else the first valid one. Standard activation scales need rows <= tile;
    with a smaller explicit tile pass ``repack_scales=True`` to repack them per CTA (an extra
    copy per call).
    """
    import torch

    if a.dim() != 2 or weight.dim() != 2:
        raise ValueError("a is (rows, K) and weight is the (K, N) view w.t()")
    rows, k = a.shape
    k_w, n = weight.shape
    if k_w != k:
        raise ValueError(f"a has K {k} but weight has K {k_w}")
    native_weight = weight.t()
    if not native_weight.is_contiguous():
        raise ValueError("weight must be the column-major view w.t() of a row-major (N, K) tensor")
    if tile is None:
        tile = pick_tile(rows, rounding=rounding, max_rows=max_rows)
    chosen_tile = tile
    per_cta = rows > chosen_tile
    if per_cta and not repack_scales:
        raise ValueError(
            f"{rows} rows exceed tile {chosen_tile}: standard 128x4 activation scales only match "
            "the kernel's per-CTA layout within one tile; use a tile >= rows or "
            "repack_scales=True"
        )
    arch = resolve_arch(None)
    chosen = choose_tactic(n, k, chosen_tile, rows, tactic, arch=arch, sfb_per_cta_packed=per_cta)
    kernel = compile_wide(chosen_tile, chosen, arch=arch, pdl=pdl)
    if out is None:
        out = torch.empty((rows, n), dtype=torch.bfloat16, device=a.device)
    scales = repack_per_cta(a_scale, rows, k, chosen_tile) if per_cta else a_scale
    return launch_wide(kernel, native_weight, weight_scale, a, scales, out, a_scale_per_cta=per_cta)


logger = get_logger(__name__)

CLASS_NAME = WIDE_RUNNER
CUSTOM_OP = WIDE_OP

WideTactic = tuple[int, int, int, int, int]


def _runner_problem(inputs: list[Any]) -> tuple[int, int, int]:
    a, b = inputs[0], inputs[1]
    return int(b.shape[1]), int(a.shape[1]), int(a.shape[0])


@functools.cache
def runner_class() -> type:
    """The runner class (built on first use: it derives from FlashInfer's ``TunableRunner``)."""
    import torch

    from fi_patches.internals import tuner as fi_tuner

    class WideLowLatencyGemmRunner(fi_tuner.tunable_runner()):  # type: ignore[misc]
        """Wide low-latency MXFP8 GEMM tactics for ``mm_mxfp8``'s 7 inputs."""

        def __init__(
            self, pdl: bool = True, max_rows: int = WIDE_MAX_ROWS, rounding: int = TILE_ROUNDING
        ) -> None:
            self.pdl = pdl
            self.max_rows = max_rows
            self.rounding = rounding

        def serves(self, inputs: list[Any]) -> bool:
            out = inputs[5]
            rows = inputs[0].shape[0]
            return LOW_LATENCY_MAX_ROWS < rows <= self.max_rows and out.dtype == torch.bfloat16

        def tile_for(self, rows: int) -> int:
            return pick_tile(rows, rounding=self.rounding, max_rows=self.max_rows)

        def get_cache_key_extras(self, inputs: list[Any]) -> tuple[Any, ...]:
            return (str(inputs[5].dtype), self.pdl, self.max_rows, self.rounding)

        def get_valid_tactics(self, inputs: list[Any], profile: Any = None) -> list[WideTactic]:
            if not self.serves(inputs):
                return []
            n, k, rows = _runner_problem(inputs)
            tile = self.tile_for(rows)
            return [(tile, *t) for t in wide_tactics(n, k, tile)]

        def validate_tactic(self, inputs: list[Any], tactic: Any) -> bool:
            """False for a cached tactic that is too narrow for these rows (FlashInfer then
            treats the entry as a miss)."""
            if not isinstance(tactic, (tuple, list)) or len(tactic) != 5:
                return False
            _, _, rows = _runner_problem(inputs)
            return rows <= int(tactic[0])

        def precompile_tactics(
            self, inputs: list[Any], tactics: list[Any], profile: Any, **kwargs: Any
        ) -> bool:
            for tactic in tactics:
                compile_wide(int(tactic[0]), tuple(tactic[1:]), pdl=self.pdl)
            return True

        def _resolve(self, inputs: list[Any], tactic: Any) -> tuple[int, Any]:
            n, k, rows = _runner_problem(inputs)
            if tactic is not None and tactic != -1 and self.validate_tactic(inputs, tactic):
                return int(tactic[0]), tuple(tactic[1:])
            if tactic is not None and tactic != -1:
                log_once(
                    logger,
                    logging.WARNING,
                    f"widefallback:{tactic}:{rows}",
                    "wide tactic %s cannot serve %d rows; running the default wide tactic",
                    tactic,
                    rows,
                )
            tile = self.tile_for(rows)
            return tile, choose_tactic(n, k, tile, rows)

        def forward(
            self, inputs: list[Any], tactic: Any = -1, do_preparation: bool = False, **kwargs: Any
        ) -> Any:
            a, b, a_scale, b_scale, _, out, _ = inputs
            tile, chosen = self._resolve(inputs, tactic)
            kernel = compile_wide(tile, chosen, pdl=self.pdl)
            if do_preparation:
                return out
            return launch_wide(kernel, b.t(), b_scale, a, a_scale, out)

    WideLowLatencyGemmRunner.__qualname__ = CLASS_NAME
    return WideLowLatencyGemmRunner


@functools.cache
def wide_runner(
    pdl: bool = True, max_rows: int = WIDE_MAX_ROWS, rounding: int = TILE_ROUNDING
) -> Any:
    """The wide runner for these options (one instance each, like FlashInfer's cached runners)."""
    return runner_class()(pdl, max_rows, rounding)
