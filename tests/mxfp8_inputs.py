"""CPU tensors laid out as ``mm_mxfp8`` hands them to its runners."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


@dataclass
class Mxfp8Problem:
    """An MXFP8 GEMM: ``rows`` activation rows times an ``(n, k)`` weight."""

    n: int
    k: int
    rows: int
    out_dtype: torch.dtype = torch.bfloat16

    def tensors(self) -> dict[str, torch.Tensor]:
        a = torch.zeros(self.rows, self.k, dtype=torch.float8_e4m3fn)
        weight = torch.zeros(self.n, self.k, dtype=torch.float8_e4m3fn)
        a_scale = torch.zeros(
            round_up(self.rows, 128) * round_up(self.k // 32, 4), dtype=torch.uint8
        )
        w_scale = torch.zeros(round_up(self.n, 128) * round_up(self.k // 32, 4), dtype=torch.uint8)
        return {"a": a, "b": weight.t(), "a_scale": a_scale, "b_scale": w_scale}

    def runner_inputs(self, workspace_bytes: int = 1024) -> list[Any]:
        """The 7 inputs ``mm_mxfp8`` passes to ``get_valid_tactics`` and the tuner (the tuner's
        cache key holds the workspace size: pass ``mm_mxfp8``'s to hit its entries)."""
        t = self.tensors()
        out = torch.empty(self.rows, self.n, dtype=self.out_dtype)
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8)
        return [t["a"], t["b"], t["a_scale"], t["b_scale"], self.out_dtype, out, workspace]

    def mm_args(self) -> tuple[torch.Tensor, ...]:
        t = self.tensors()
        return t["a"], t["b"], t["a_scale"], t["b_scale"]
