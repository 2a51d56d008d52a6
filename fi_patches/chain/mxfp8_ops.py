"""FlashInfer's MXFP8 runners as ops of a chain: the low-latency runner, the cute-dsl runner and
fi_patches' wide runner, each knowing its pin-table section and how a tactic reads as a pin.

Tactics are listed from shape-only inputs (:func:`~fi_patches.pinning.serving.
mxfp8_runner_inputs`), so listing works on a machine that cannot launch; launch inputs are
built on the CUDA device on first use.
"""

from __future__ import annotations

from typing import Any

from fi_patches.chain.ops import RunnerOp
from fi_patches.chain.spec import Bucket
from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import as_tactic, tactic_json
from fi_patches.pins.table import PinTable

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

        from fi_patches.chain.operands import mxfp8_operand
        from fi_patches.cute_dsl.runner import workspace

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
        from fi_patches.cute_dsl.validity import why_not_runnable

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

        from fi_patches.cute_dsl.runner import cute_dsl_runner

        runner = cute_dsl_runner(sm_version // 10, sm_version % 10, torch.bfloat16)
        return CuteDslOp(name, section, n, k, runner, device)
    if section == "wide":
        from fi_patches.wide.runner import wide_runner

        return Mxfp8Op(name, section, n, k, wide_runner(), device)
    raise ValueError(f"no MXFP8 runner for section {section!r}")
