"""The FlashInfer runners whose tactics can be pinned, where they live, and how to read the
pinned problem (weight ``n``, ``k`` and activation rows) from their inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fi_patches.internals import Internal
from fi_patches.internals import flashinfer as fi

Problem = tuple[int, int, int]
"""``(n, k, rows)``: the weight's output features, its input features, the activation rows."""

Shapes = Sequence[Sequence[int]]


@dataclass(frozen=True)
class PinnedRunner:
    """A runner class fi_patches pins (the class its ``factory`` builds) and the section holding
    its pins.

    A ``silenced`` runner serves the same op with tactics of another form (FlashInfer's warp
    split-K runner beside the cute-dsl one): for a pinned problem it offers nothing, so the
    tuner profiles the pin alone.
    """

    factory: Internal
    section: str
    weight_inputs: dict[int, tuple[int, bool]]
    """Per input-list length: which input holds the weight, and whether its shape reads
    ``(k, n)`` (a column-major view) rather than ``(n, k)``. The hot path's one test is a dict
    lookup of that tensor's ``shape``, since most problems are not pinned."""

    problem: Callable[[Sequence[Any], Shapes | None], Problem | None]
    """``(n, k, rows)`` of an MXFP8 call from the runner's inputs (``shapes`` override the
    tensors' shapes, as the tuner's cache lookups pass them), or None for other dtypes."""

    normalize: Callable[[Any], Any]
    """A tactic as the pin table spells it (JSON-loaded caches hold lists, not tuples)."""

    silenced: bool = False

    @property
    def module(self) -> str:
        """The module FlashInfer defines the runner class in."""
        return self.factory.module

    @property
    def class_name(self) -> str:
        return self.factory.builds


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


def nested_tuple(tactic: Any) -> Any:
    """A tactic with every list turned into a tuple (JSON caches hold lists)."""
    if isinstance(tactic, (list, tuple)):
        return tuple(nested_tuple(part) for part in tactic)
    return tactic


LOW_LATENCY = PinnedRunner(
    fi.LOW_LATENCY_RUNNER,
    "low_latency",
    {7: (1, True), 9: (0, False)},  # mm_mxfp8's b is the (K, N) view; native A is (N, K)
    mxfp8_problem,
    nested_tuple,
)

CUTE_DSL = PinnedRunner(
    fi.CUTE_DSL_RUNNER,
    "cute_dsl",
    {7: (1, True)},
    mxfp8_problem,
    nested_tuple,
)

CUTE_DSL_WARP = PinnedRunner(
    fi.CUTE_DSL_WARP_RUNNER,
    "cute_dsl",
    {7: (1, True)},
    mxfp8_problem,
    nested_tuple,
    silenced=True,
)
