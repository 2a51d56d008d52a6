"""Ops of a chain: what the harness needs from one GEMM (its tactics in the enumerator's order,
device inputs, a launch), and the adapter for any runner with FlashInfer's two methods
``get_valid_tactics(inputs, profile)`` and ``forward(inputs, tactic=...)``.

The FlashInfer runners themselves (low-latency, cute-dsl, fi_patches' wide runner) are adapted
in :mod:`fi_patches.chain.ops`; this module needs neither torch nor FlashInfer, so the
harness runs with torch stand-ins.

FlashInfer's MXFP8 runners as ops of a chain: the low-latency runner, the cute-dsl runner and
fi_patches' wide runner, each knowing its pin-table section and how a tactic reads as a pin.

Tactics are listed from shape-only inputs (:func:`~fi_patches.pinning.serving.
mxfp8_runner_inputs`), so listing works on a machine that cannot launch; launch inputs are
built on the CUDA device on first use.

MXFP8 operands for launching and checking the pinned kernels: E4M3 values that are exact
quarter-integers, E8M0 scales in the swizzled 128x4 layout, and the float64 matrix they encode,
so a kernel's output can be checked against a float64 reference. Shared by ``tune`` (launch
inputs) and ``validate`` (numerics), and by the GPU tests.

Run one pinned MXFP8 kernel on the GPU and compare its output with a float64 reference: the
check ``validate`` makes per pin, and the GPU tests' (``tests/test_wide_gpu.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from fi_patches.chain.spec import Bucket
from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import as_tactic, tactic_json
from fi_patches.pins.table import PinTable


@runtime_checkable
class Op(Protocol):
    """One GEMM of a chain."""

    name: str

    def tactics(self, rows: int) -> list[Any]:
        """The tactics offered at ``rows`` rows, in the runner's own (enumerator) order."""
        ...

    def inputs(self, rows: int) -> Any:
        """Inputs on the device for ``rows`` rows, built once and reused by every launch."""
        ...

    def launch(self, inputs: Any, tactic: Any) -> None:
        """Enqueue the GEMM with ``tactic`` on the current stream (captured into a graph)."""
        ...


class RunnerOp:
    """An op served by ``runner``: any object with ``get_valid_tactics(inputs, profile)`` and
    ``forward(inputs, tactic=...)``, as FlashInfer's ``TunableRunner`` has them.

    ``make_inputs(rows)`` builds launch inputs on the device; ``listing_inputs(rows)`` (default:
    the same) builds what ``get_valid_tactics`` is asked with, so a FlashInfer runner can list
    its tactics from shape-only tensors on a machine that cannot launch it.
    """

    def __init__(
        self,
        name: str,
        runner: Any,
        make_inputs: Callable[[int], Any],
        listing_inputs: Callable[[int], Any] | None = None,
    ) -> None:
        self.name = name
        self.runner = runner
        self._make_inputs = make_inputs
        self._listing_inputs = listing_inputs or make_inputs
        self._inputs: dict[int, Any] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {type(self.runner).__name__})"

    def tactics(self, rows: int) -> list[Any]:
        offered = self.runner.get_valid_tactics(self._listing_inputs(rows), None)
        return [as_tactic(t) for t in offered]

    def inputs(self, rows: int) -> Any:
        if rows not in self._inputs:
            self._inputs[rows] = self._make_inputs(rows)
        return self._inputs[rows]

    def launch(self, inputs: Any, tactic: Any) -> None:
        self.runner.forward(inputs, tactic=tactic)


SEED = 20260
"""Operand seed: the same inputs in every run, so runs compare like for like."""


class Mxfp8Op(RunnerOp):
    """An MXFP8 GEMM of weight ``(n, k)`` on the runner of pin-table ``section``."""

    def __init__(
        self, name: str, section: str, n: int, k: int, runner: Any, device: Any = None
    ) -> None:
        super().__init__(name, runner, self._launch_inputs, self._listing_inputs)
        self.section, self.n, self.k = section, n, k
        self.device = device
        """Where launch inputs go; None: the current CUDA device."""
        self._weight: tuple[Any, Any] | None = None

    def __repr__(self) -> str:
        return f"{self.section} runner for {self.n}x{self.k}"

    def _listing_inputs(self, rows: int) -> list[Any]:
        from fi_patches.pinning.serving import mxfp8_runner_inputs

        return mxfp8_runner_inputs(self.n, self.k, rows)

    def _launch_inputs(self, rows: int) -> list[Any]:
        import torch

        from fi_patches.cute_dsl import workspace

        device = (
            torch.device("cuda", torch.cuda.current_device())
            if self.device is None
            else torch.device(self.device)
        )
        if self._weight is None:
            w, w_scale, _ = mxfp8_operand(torch, self.n, self.k, SEED + self.n, reference=False)
            self._weight = (w.to(device), w_scale.to(device))
        w, w_scale = self._weight
        a, a_scale, _ = mxfp8_operand(torch, rows, self.k, SEED + rows, reference=False)
        out = torch.empty(rows, self.n, dtype=torch.bfloat16, device=device)
        return [
            a.to(device),
            w.t(),
            a_scale.to(device),
            w_scale,
            torch.bfloat16,
            out,
            workspace(device),
        ]

    def pin_of(self, table: PinTable | None, bucket: Bucket) -> Any:
        """The table's current pin for this op at the bucket's measured rows, as a tactic of
        this runner, or None."""
        if table is None:
            return None
        if self.section == "low_latency":
            return as_tactic(table.low_latency_tactic(self.n, self.k, bucket.rows))
        if self.section == "cute_dsl":
            return as_tactic(table.cute_dsl_tactic(self.n, self.k, bucket.rows))
        from fi_patches.wide.tactics import pick_tile

        tile = pick_tile(bucket.rows)
        entry = table.wide_pin(self.n, self.k, tile)
        return None if entry is None else (tile, *entry.tactic)

    def pin_entry(self, bucket: Bucket, tactic: Any) -> dict[str, Any]:
        """The pin-table entry (file form) that pins ``tactic`` for ``bucket``."""
        if self.section == "wide":
            tile, *rest = tactic
            return {"n": self.n, "k": self.k, "tile": int(tile), "tactic": tactic_json(rest)}
        return {
            "n": self.n,
            "k": self.k,
            "min_rows": bucket.min_rows,
            "max_rows": bucket.max_rows,
            "tactic": tactic_json(tactic),
        }


class CuteDslOp(Mxfp8Op):
    """The cute-dsl runner, offering only tactics it would run as given: from 0.7.1 it
    silently replaces some split-K and narrow-tile tactics, which a pin must never be."""

    def tactics(self, rows: int) -> list[Any]:
        from fi_patches.cute_dsl import why_not_runnable

        inputs = self._listing_inputs(rows)
        return [
            t for t in super().tactics(rows) if why_not_runnable(self.runner, inputs, t) is None
        ]


def mxfp8_op(
    name: str, section: str, n: int, k: int, sm_version: int, device: Any = None
) -> Mxfp8Op:
    """The op of ``section`` (``low_latency``, ``cute_dsl`` or ``wide``) for weight ``(n, k)``
    on an ``sm_version`` device (e.g. 103), with launch inputs on ``device`` (default: the
    current CUDA device)."""
    if section == "low_latency":
        runner = fi.low_latency_runner(sm_version, True)
        return Mxfp8Op(name, section, n, k, runner, device)
    if section == "cute_dsl":
        import torch

        from fi_patches.cute_dsl import cute_dsl_runner

        runner = cute_dsl_runner(sm_version // 10, sm_version % 10, torch.bfloat16)
        return CuteDslOp(name, section, n, k, runner, device)
    if section == "wide":
        from fi_patches.wide.launch import wide_runner

        return Mxfp8Op(name, section, n, k, wide_runner(), device)
    raise ValueError(f"no MXFP8 runner for section {section!r}")


RTOL = 1e-2
"""Relative tolerance against the BF16-rounded float64 reference (the output is BF16)."""

ATOL_OF_MAX = 1e-3
"""Absolute tolerance as a fraction of the reference's largest magnitude."""


def mxfp8_operand(
    torch: Any, rows: int, k: int, seed: int, *, reference: bool = True
) -> tuple[Any, Any, Any]:
    """``(values, scales, dequantized)`` of a ``rows x k`` operand built on CPU: E4M3 values,
    their 1-D swizzled E8M0 scales, and the float64 matrix they encode (None unless
    ``reference``)."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randint(-12, 13, (rows, k), generator=gen).to(torch.float32) / 4
    quantized = values.to(torch.float8_e4m3fn)
    exponents = torch.randint(124, 131, (rows, k // 32, 1), generator=gen, dtype=torch.uint8)
    swizzled = fi.reorder_scale_factors()(exponents, rows, k, 32).reshape(-1).contiguous()
    if not reference:
        return quantized, swizzled, None
    scale = torch.exp2(exponents[:, :, 0].to(torch.float64) - 127).repeat_interleave(32, dim=1)
    return quantized, swizzled, quantized.to(torch.float64) * scale


def reference_product(torch: Any, a_ref: Any, w_ref: Any) -> Any:
    """``a @ w.T`` in float64, rounded to BF16 as the kernels' output is, back in float64."""
    return (a_ref @ w_ref.T).to(torch.bfloat16).to(torch.float64)


def mismatch(torch: Any, got: Any, ref: Any) -> str | None:
    """None when ``got`` (any dtype, on any device) matches ``ref`` within :data:`RTOL` and
    :data:`ATOL_OF_MAX`, else what is wrong: NaNs left in the output, or the worst error."""
    values = got.detach().cpu().to(torch.float64)
    if values.shape != ref.shape:
        return f"output shape {tuple(values.shape)} is not {tuple(ref.shape)}"
    if torch.isnan(values).any():
        return f"{int(torch.isnan(values).sum())} outputs are NaN (left unwritten)"
    atol = ATOL_OF_MAX * float(ref.abs().max())
    error = (values - ref).abs()
    allowed = atol + RTOL * ref.abs()
    bad = error > allowed
    if not bool(bad.any()):
        return None
    worst = int(torch.argmax(error - allowed))
    row, col = divmod(worst, ref.shape[1])
    return (
        f"{int(bad.sum())} of {ref.numel()} outputs differ; worst at ({row}, {col}): "
        f"{float(values[row, col]):.6g} vs reference {float(ref[row, col]):.6g}"
    )


def operands(torch: Any, n: int, k: int, rows: int) -> tuple[list[Any], Any, Any]:
    """``mm_mxfp8``'s seven runner inputs on the current CUDA device, with the output poisoned
    with NaN, plus ``(out, reference)``."""
    from fi_patches.cute_dsl import workspace

    device = torch.device("cuda", torch.cuda.current_device())
    a, a_scale, a_ref = mxfp8_operand(torch, rows, k, seed=rows)
    w, w_scale, w_ref = mxfp8_operand(torch, n, k, seed=1000 + n)
    out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device=device)
    inputs = [
        a.to(device),
        w.to(device).t(),
        a_scale.to(device),
        w_scale.to(device),
        torch.bfloat16,
        out,
        workspace(device),
    ]
    return inputs, out, reference_product(torch, a_ref, w_ref)


def low_latency_mismatch(n: int, k: int, rows: int, tactic: Sequence[int]) -> str | None:
    """FlashInfer's low-latency runner with ``tactic``, checked; None when it matches."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    inputs, out, ref = operands(torch, n, k, rows)
    fi.low_latency_runner(major * 10 + minor, True).forward(inputs, tactic=as_tactic(tactic))
    torch.cuda.synchronize()
    return mismatch(torch, out, ref)


def cute_dsl_mismatch(n: int, k: int, rows: int, tactic: Any) -> str | None:
    """FlashInfer's cute-dsl runner with ``tactic`` as pinned (never a silent substitute)."""
    import torch

    from fi_patches.cute_dsl import cute_dsl_runner, why_not_runnable

    major, minor = torch.cuda.get_device_capability()
    runner = cute_dsl_runner(major, minor, torch.bfloat16)
    inputs, out, ref = operands(torch, n, k, rows)
    reason = why_not_runnable(runner, inputs, tactic)
    if reason is not None:
        return f"does not run as pinned: {reason}"
    runner.forward(inputs, tactic=tactic)
    torch.cuda.synchronize()
    return mismatch(torch, out, ref)


def wide_mismatch(
    n: int,
    k: int,
    rows: int,
    *,
    tile: int | None = None,
    tactic: Sequence[int] | None = None,
    repack_scales: bool = False,
) -> str | None:
    """``wide_mm`` at ``rows`` rows (tile and tactic as it would choose them unless given)."""
    import torch

    from fi_patches.wide.launch import wide_mm

    inputs, out, ref = operands(torch, n, k, rows)
    a, b, a_scale, b_scale = inputs[0], inputs[1], inputs[2], inputs[3]
    result = wide_mm(
        a, a_scale, b, b_scale, out=out, tile=tile, tactic=tactic, repack_scales=repack_scales
    )
    torch.cuda.synchronize()
    if result is not out:
        return "wide_mm did not write the output it was given"
    return mismatch(torch, out, ref)
