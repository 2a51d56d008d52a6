"""How each MXFP8 section of a pin table pins FlashInfer's tuner (a :class:`Specialization` of
the engine): the runner classes it pins, the ops it serves, where a call's inputs hold the
weight, how they name the problem (weight ``n``, ``k`` and activation rows), and which of a
weight's entries serves a problem. A ``[[pin]]`` names FlashInfer's key directly; a section
names a problem in the model's terms, and its specialization finds the entry for a call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import as_tactic
from fi_patches.pins.schema import WIDE_OP, WIDE_RUNNER
from fi_patches.pins.table import covering

Problem = tuple[int, int, int]
"""``(n, k, rows)``: the weight's output features, its input features, the activation rows."""

Shapes = Sequence[Sequence[int]]


def _dims(inputs: Sequence[Any], shapes: Shapes | None, index: int) -> Sequence[int]:
    return shapes[index] if shapes is not None else inputs[index].shape


def mxfp8_problem(inputs: Sequence[Any], shapes: Shapes | None = None) -> Problem | None:
    """The MXFP8 problem of ``mm_mxfp8``'s 7 runner inputs ``[a (rows, K), b (K, N), a_scale,
    b_scale, out_dtype, out, workspace]``, also accepting the low-latency kernel's 9 native
    ones ``[A (N, K), B (rows, K), sfa, sfb, C, workspace, mnkl, alpha, bias]``. FP4 (10
    inputs) and FP8 with E4M3 scales are not MXFP8 and are never pinned."""
    import torch

    if len(inputs) == 7:
        a, b = inputs[0], inputs[1]
        if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
            return None
        a_dims, b_dims = _dims(inputs, shapes, 0), _dims(inputs, shapes, 1)
        return int(b_dims[1]), int(a_dims[1]), int(a_dims[0])
    if len(inputs) == 9:
        weight, act, sfa = inputs[0], inputs[1], inputs[2]
        if (
            weight.dtype != torch.float8_e4m3fn
            or act.dtype != torch.float8_e4m3fn
            or sfa.dtype != torch.float8_e8m0fnu
        ):
            return None
        w_dims, a_dims = _dims(inputs, shapes, 0), _dims(inputs, shapes, 1)
        return int(w_dims[0]), int(w_dims[1]), int(a_dims[0])
    return None


def _row_range_pin(group: Sequence[Any], problem: Problem, runner: Any) -> tuple[Any, Any] | None:
    entry = covering(group, problem[2])
    return None if entry is None else (entry, entry.tactic)


def _wide_pin(group: Sequence[Any], problem: Problem, runner: Any) -> tuple[Any, Any] | None:
    tile_for = getattr(runner, "tile_for", None)
    if tile_for is None:
        return None
    tile = tile_for(problem[2])
    for entry in group:
        if entry.tile == tile:
            return entry, (tile, *entry.tactic)
    return None


@dataclass(frozen=True)
class Specialization:
    """How one pin-table section pins FlashInfer's tuner."""

    section: str
    runners: tuple[str, ...]
    """The runner classes (by name, as FlashInfer's keys name them) it pins."""
    ops: tuple[str, ...] | None
    """The custom ops it serves; None for any (the low-latency runner serves several)."""
    weight_inputs: dict[int, tuple[int, bool]]
    """Per input-list length: which input holds the weight, and whether its shape reads
    ``(k, n)`` (a column-major view) rather than ``(n, k)``. The hot path's one test is a dict
    lookup of that tensor's ``shape``, since most problems are not pinned."""
    problem: Callable[[Sequence[Any], Shapes | None], Problem | None]
    """``(n, k, rows)`` of a call from the runner's inputs (``shapes`` override the tensors'
    shapes, as the tuner's cache lookups pass them), or None for other dtypes."""
    pin_for: Callable[[Sequence[Any], Problem, Any], tuple[Any, Any] | None]
    """``(entry, tactic in the runner's form)`` of a weight's entries (priority order) for a
    problem and the runner asked, or None."""
    recorded_ops: tuple[str, ...] = ()
    """The custom ops whose cached winners of these runners ``pins record`` writes as this
    section's entries (other ops' keys stay ``[[pin]]`` entries)."""
    silences: tuple[str, ...] = ()
    """Runner classes that serve the same op with tactics of another form (FlashInfer's warp
    split-K runner beside the cute-dsl one): for a pinned problem they offer nothing, so the
    tuner profiles the pin alone."""

    def normalize(self, tactic: Any) -> Any:
        """A tactic as the table spells it (JSON-loaded caches hold lists, not tuples)."""
        return as_tactic(tactic)


LOW_LATENCY = Specialization(
    "low_latency",
    (fi.LOW_LATENCY_RUNNER.builds,),
    None,
    {7: (1, True), 9: (0, False)},  # mm_mxfp8's b is the (K, N) view; native A is (N, K)
    mxfp8_problem,
    _row_range_pin,
    recorded_ops=(fi.MXFP8_OP,),
)

CUTE_DSL = Specialization(
    "cute_dsl",
    (fi.CUTE_DSL_RUNNER.builds,),
    (fi.MXFP8_OP,),
    {7: (1, True)},
    mxfp8_problem,
    _row_range_pin,
    recorded_ops=(fi.MXFP8_OP,),
    silences=(fi.CUTE_DSL_WARP_RUNNER.builds,),
)

WIDE = Specialization(
    "wide",
    (WIDE_RUNNER,),
    (WIDE_OP,),
    {7: (1, True)},
    mxfp8_problem,
    _wide_pin,
    recorded_ops=(WIDE_OP,),
)

SPECIALIZATIONS: tuple[Specialization, ...] = (LOW_LATENCY, CUTE_DSL, WIDE)
