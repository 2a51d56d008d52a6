"""Every FlashInfer and torch.distributed internal the rank guard (``fi_patches.ranks``) uses,
in the boundary's form: each declared with its signature, and the accessors and call-shape
readers the guard calls. None of them gates a feature but the profile-inputs builder, which the
tuner's contract declares (preseed needs it): the guard checks them itself (see
``fi_patches.ranks``) and reports what is missing.

FlashInfer 0.7.4 defines its tuner in ``flashinfer.autotuner.autotuner`` and re-exports the
public names from ``flashinfer.autotuner``; the guard patches the setter where it is defined and
where it is re-exported, since callers import it from either place at call time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from fi_patches.internals import CALLABLE, Declared, Internal, OneOf
from fi_patches.internals import tuner as fi_tuner

AUTOTUNER = "flashinfer.autotuner"
"""Where FlashInfer's public tuner names live (a package from 0.7.4)."""

TUNER_MODULES = ("flashinfer.autotuner.autotuner", "flashinfer.autotuner")
"""Where the tuner's private tune-group gates may be defined, newest layout first."""

SET_GROUP = "set_autotune_process_group"
SET_GROUP_PARAMS = ("group",)
GET_GROUP = "get_autotune_process_group"

OPERATION_GATE = "_check_tuning_group_phase"
"""Called at the start of ``choose_one`` under a tune group with phase ``"operation"`` and
selection ``("choose_one", custom_op, [runner class names], ...)``."""
OPERATION_GATE_PARAMS = ("phase", "selection", "error")
OPERATION_PHASE = "operation"

CANDIDATE_GATE = "_sync_oom_across_tune_group"
"""Called once per (profile, runner) with phase ``("candidates", custom_op, step, runner
index)`` and the candidate list the ranks are about to profile, before an all-reduce."""
CANDIDATE_GATE_PARAMS = ("local_oom", "phase", "selection", "error")
CANDIDATES_PHASE = "candidates"

PREPARE_INPUTS = "AutoTuner._prepare_input_tensors"
"""Builds the profiling inputs of one optimization profile (the bucket) just before the
candidates of that profile are listed."""
OPT_SHAPES = "get_opt_shapes"
"""``OptimizationProfile.get_opt_shapes()``: the shapes a profile (one bucket) tunes at."""

TACTIC_TO_JSON = "_tactic_to_json"
"""FlashInfer's canonical JSON form of a tactic, the one its own tune-group gates hash."""

C10D = "torch.distributed.distributed_c10d"
GROUP_STORE = "_get_process_group_store"
"""The key-value store a process group was created with (every backend has one)."""
GROUP_STORE_PARAMS = ("pg",)


def _gate(key: str, name: str, params: tuple[str, ...], kind: str = CALLABLE) -> OneOf:
    return OneOf(key, tuple(Internal(key, kind, m, name, params=params) for m in TUNER_MODULES))


SET_TUNE_GROUP = Internal(
    "set_autotune_process_group", CALLABLE, AUTOTUNER, SET_GROUP, params=SET_GROUP_PARAMS
)
GET_TUNE_GROUP = Internal("get_autotune_process_group", CALLABLE, AUTOTUNER, GET_GROUP)
OPERATION_GATE_FN = _gate("tune_group_operation_gate", OPERATION_GATE, OPERATION_GATE_PARAMS)
CANDIDATE_GATE_FN = _gate("tune_group_candidate_gate", CANDIDATE_GATE, CANDIDATE_GATE_PARAMS)
PREPARE_INPUTS_FN = fi_tuner.PREPARE_INPUTS
"""Declared with the tuner's contract, where it also gates preseed."""
TACTIC_TO_JSON_FN = _gate("tactic_to_json", TACTIC_TO_JSON, ())
GROUP_STORE_FN = Internal(
    "process_group_store", CALLABLE, C10D, GROUP_STORE, params=GROUP_STORE_PARAMS
)

GUARD_PROBES: tuple[Declared, ...] = (SET_TUNE_GROUP, GET_TUNE_GROUP)
"""What the automatic guard needs from FlashInfer."""

DETECTOR_PROBES: tuple[Declared, ...] = (
    *GUARD_PROBES,
    OPERATION_GATE_FN,
    CANDIDATE_GATE_FN,
    PREPARE_INPUTS_FN,
    TACTIC_TO_JSON_FN,
)
"""What the tuning divergence detector needs from FlashInfer's tuner."""

STORE_PROBES: tuple[Declared, ...] = (GROUP_STORE_FN,)
"""What the fingerprint exchange needs from torch.distributed."""

INTERNALS: tuple[Declared, ...] = (
    *(p for p in DETECTOR_PROBES if p is not PREPARE_INPUTS_FN),
    GROUP_STORE_FN,
)
"""Every internal the rank guard uses that this module declares (the profile-inputs builder is
the tuner contract's)."""


def first_failure(probes: tuple[Declared, ...]) -> str | None:
    """The reason of the first probe that fails, or None when all hold."""
    for probe in probes:
        reason = probe.probe()
        if reason is not None:
            return reason
    return None


def autotuner() -> ModuleType:
    return importlib.import_module(AUTOTUNER)


def tuner_module() -> ModuleType:
    """The module defining the tuner's tune-group gates."""
    for name in TUNER_MODULES:
        module = importlib.import_module(name)
        if callable(getattr(module, CANDIDATE_GATE, None)):
            return module
    raise AttributeError(f"none of {', '.join(TUNER_MODULES)} defines {CANDIDATE_GATE}")


def setter_owners() -> list[ModuleType]:
    """The modules whose ``set_autotune_process_group`` attribute is FlashInfer's setter: where
    it is re-exported and where it is defined (one module on layouts without a package)."""
    package = autotuner()
    setter = getattr(package, SET_GROUP)
    owners = [package]
    defining = importlib.import_module(getattr(setter, "__module__", AUTOTUNER))
    if defining is not package and vars(defining).get(SET_GROUP) is setter:
        owners.append(defining)
    return owners


def tune_group() -> Any:
    """The process group FlashInfer's tuner synchronizes over now, or None."""
    getter: Callable[[], Any] = getattr(autotuner(), GET_GROUP)
    return getter()


def tuner_class() -> type:
    """FlashInfer's ``AutoTuner``, the owner of ``_prepare_input_tensors``."""
    owner, _ = PREPARE_INPUTS.split(".")
    tuner: type = getattr(tuner_module(), owner)
    return tuner


def tactic_json(tactic: Any) -> Any:
    """``tactic`` in FlashInfer's canonical JSON form."""
    return getattr(tuner_module(), TACTIC_TO_JSON)(tactic)


def group_store(group: Any) -> Any:
    """The ``torch.distributed.Store`` that ``group`` was created with."""
    getter = getattr(importlib.import_module(C10D), GROUP_STORE)
    return getter(group)


@dataclass(frozen=True)
class CandidateGateCall:
    """One call of the candidate gate: ``phase`` is ``("candidates", op, step, runner index)``,
    ``selection`` the list about to be profiled; ``failed`` when this rank could not prepare
    the runner (FlashInfer then coordinates the fallback itself)."""

    op: str
    step: int
    runner_index: int
    selection: Sequence[Any]
    failed: bool


def _bound(
    params: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    bound = dict(zip(params, args, strict=False))  # the leading positional arguments
    bound.update(kwargs)
    return bound


def candidate_gate_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> CandidateGateCall | None:
    """The candidate gate's arguments, or None for the gate's other phases."""
    bound = _bound(CANDIDATE_GATE_PARAMS, args, kwargs)
    phase = bound.get("phase")
    if not (isinstance(phase, tuple) and len(phase) == 4 and phase[0] == CANDIDATES_PHASE):
        return None
    failed = bool(bound.get("local_oom")) or bool(bound.get("error"))
    return CandidateGateCall(
        str(phase[1]), int(phase[2]), int(phase[3]), bound.get("selection", ()), failed
    )


def operation_gate_call(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, list[str]] | None:
    """``(op, runner class names)`` of an ``"operation"`` gate call, whose selection is
    ``("choose_one", op, [runner class names], ...)``; None for other phases."""
    bound = _bound(OPERATION_GATE_PARAMS, args, kwargs)
    if bound.get("phase") != OPERATION_PHASE:
        return None
    selection = bound.get("selection", ())
    return str(selection[1]), [str(name) for name in selection[2]]


def profile_shapes(profile: Any) -> str:
    """The shapes an optimization profile tunes at, as text (the bucket, in a message)."""
    shapes = getattr(profile, OPT_SHAPES)()
    return str(tuple(tuple(int(d) for d in shape) for shape in shapes))
