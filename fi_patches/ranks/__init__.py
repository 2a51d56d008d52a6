"""Same tactics on every rank: :func:`rank_guard` compares what each rank of a process group
runs (versions, device, feature states, pin tables, ``FI_PATCHES_*`` settings) before the ranks
tune together, and the tuning divergence detector compares their candidate lists while they
do. Importing this package imports neither torch nor FlashInfer: :func:`rank_guard` and its
errors load on first use (:mod:`fi_patches.ranks.guard`), and the automatic guard's patches are
built only when it is armed.

The automatic rank guard (:data:`GUARD`): while fi_patches is active (``fi_patches.auto``
requested, or a ``pinned_tactics()`` block open), FlashInfer's ``set_autotune_process_group``
first runs :func:`~fi_patches.ranks.guard.rank_guard` on the group it is given, in the mode
``FI_PATCHES_RANK_GUARD`` names. With ``FI_PATCHES_RANK_GUARD_TUNING=1`` the same installation
also carries the tuning divergence detector (below).

The setter wrapper never raises because of fi_patches, except :class:`RankMismatchError` in
``raise`` mode, which is its purpose. It is a reversible patch, reference-counted like the
pinning wrappers, so the last holder to leave restores FlashInfer's own function.

The tuning divergence detector (``FI_PATCHES_RANK_GUARD_TUNING=1``): under a tune process
group, before the ranks profile an (op, runner, bucket), they compare a hash of the candidate
list each is about to profile, and a difference raises :class:`TacticDivergenceError` with the
op, the bucket and each rank's list, instead of a collective that hangs or fails without
saying which rank differs.

Where it hooks FlashInfer's tuner (``choose_one``, see :mod:`fi_patches.internals.tuner`):
the ``"operation"`` gate names the op and its runners, ``_prepare_input_tensors`` receives the
bucket's optimization profile, and the ``("candidates", op, step, runner)`` gate receives the
final candidate list just before FlashInfer all-reduces over the group. The comparison runs
through the group's store with a deadline (:mod:`fi_patches.ranks.exchange`), so a rank that
never reaches the gate is named instead of waited for.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fi_patches import _env
from fi_patches._lazy import lazy_exports
from fi_patches._logging import get_logger, log_once
from fi_patches.internals import tuner as fi_tuner
from fi_patches.patching import AttributePatch, PatchSet, proxied
from fi_patches.pinning.installation import Hold, Installation

if TYPE_CHECKING:
    from fi_patches.ranks.exchange import GroupView
    from fi_patches.ranks.guard import Fingerprint as Fingerprint
    from fi_patches.ranks.guard import RankMismatchError as RankMismatchError
    from fi_patches.ranks.guard import TacticDivergenceError as TacticDivergenceError
    from fi_patches.ranks.guard import local_fingerprint as local_fingerprint
    from fi_patches.ranks.guard import rank_guard as rank_guard

_EXPORTS = {
    "rank_guard": "fi_patches.ranks.guard",
    "RankMismatchError": "fi_patches.ranks.guard",
    "Fingerprint": "fi_patches.ranks.guard",
    "local_fingerprint": "fi_patches.ranks.guard",
    "TacticDivergenceError": "fi_patches.ranks.guard",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

logger = get_logger(__name__)


def guard_before_tuning(group: Any) -> None:
    """Run the guard on ``group`` in the configured mode; only a mismatch in ``raise`` mode
    escapes, anything else is logged and FlashInfer goes on."""

    mode = _env.rank_guard_mode()
    if mode == "off":
        return
    # The guard and its exchange load only when a tune group is set (not at start-up).
    from fi_patches.ranks.guard import DEFAULT_TIMEOUT, RankMismatchError, run_guard

    try:
        run_guard(group, mode, DEFAULT_TIMEOUT, fi_tuner.SET_GROUP)
    except RankMismatchError:
        if mode == "raise":
            raise
        logger.exception("fi_patches' rank guard raised in mode %r", mode)
    except Exception:
        log_once(
            logger,
            logging.WARNING,
            "automatic-guard-failed",
            "fi_patches' automatic rank guard could not run; FlashInfer tunes unguarded",
            exc_info=True,
        )


def _group(group: Any, *args: Any, **kwargs: Any) -> Any:
    """Binds a ``set_autotune_process_group`` call's group as FlashInfer's function names it."""
    return group


def _guard_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``set_autotune_process_group`` that runs the guard on the group first (wrapt's form)."""
    try:
        group = _group(*args, **kwargs)
    except TypeError:  # a call FlashInfer's own function rejects: it raises what it raises
        group = None
    if group is not None:
        guard_before_tuning(group)
    return wrapped(*args, **kwargs)


_guarded_setter = proxied(_guard_wrapper)
"""The setter's replacement: a ``wrapt.FunctionWrapper`` (a setter is no hot path), enabled
while the guard's installation holds it."""


def _build() -> PatchSet:
    reason = fi_tuner.first_failure(fi_tuner.GUARD_PROBES)
    if reason is not None:
        log_once(
            logger,
            logging.INFO,
            f"unavailable:{reason}",
            "fi_patches' automatic rank guard is off: %s",
            reason,
        )
        return PatchSet([])
    patches: list[Any] = [
        AttributePatch(owner, fi_tuner.SET_GROUP, _guarded_setter)
        for owner in fi_tuner.setter_owners()
    ]
    if _env.rank_guard_tuning():
        patches += detector_patches()
    return PatchSet(patches)


GUARD = Installation("rank_guard", _build)
"""Held by ``fi_patches.auto`` and by each open ``pinned_tactics()`` block."""


def arm() -> Hold | None:
    """Acquire the guard's installation (give the hold back to release it); None when there is
    no FlashInfer to guard, or (logged once) when it could not be applied, so pinning goes on
    without it."""
    if "flashinfer" not in sys.modules:
        from fi_patches.compat.features import installed_flashinfer

        # Import FlashInfer before taking the installation's lock: its post-import hook
        # (fi_patches.auto) arms the guard too, and must not find the lock held.
        if not installed_flashinfer().importable:
            return None
    try:
        return GUARD.acquire()
    except Exception:
        log_once(
            logger,
            logging.WARNING,
            "arm-failed",
            "fi_patches could not install its automatic rank guard; pins apply without it",
            exc_info=True,
        )
        return None


TUNING_TIMEOUT = 1800.0
"""Seconds to wait for the other ranks at a gate: tuning compiles kernels between gates, at
different speeds per rank, so this matches torch.distributed's own default deadline."""

NAMESPACE = "tuning"
_LIST_CHARS = 600


_context = threading.local()


def _payload(call: fi_tuner.CandidateGateCall) -> bytes:
    runners: Sequence[str] = getattr(_context, "runners", ())
    same_op = getattr(_context, "op", None) == call.op
    known = same_op and call.runner_index < len(runners)
    entry: dict[str, Any] = {
        "op": call.op,
        "runner": runners[call.runner_index] if known else f"runner #{call.runner_index}",
        "bucket": getattr(_context, "bucket", None) or f"profile #{call.step}",
        "skip": None,
    }
    if call.failed:
        entry["skip"] = "a rank failed to prepare this runner (FlashInfer coordinates that)"
        return json.dumps(entry).encode()
    try:
        tactics = [fi_tuner.tactic_json(t) for t in call.selection]
        text = json.dumps(tactics, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except Exception as exc:
        entry["skip"] = f"a candidate list is not representable ({type(exc).__name__})"
    else:
        entry["tactics"] = tactics
        entry["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    return json.dumps(entry).encode()


def _list_text(tactics: list[Any]) -> str:
    text = json.dumps(tactics)
    if len(text) > _LIST_CHARS:
        text = text[: _LIST_CHARS - 4] + " ..."
    return f"{len(tactics)} tactic{'' if len(tactics) == 1 else 's'} {text}"


def divergence_message(view: GroupView, entries: list[dict[str, Any]]) -> str:
    mine = entries[view.rank]
    buckets = {e["bucket"] for e in entries}
    where = f"op {mine['op']!r}, runner {mine['runner']}"
    if len(buckets) == 1:
        where += f", bucket {mine['bucket']}"
    lines = [
        f"fi_patches tuning divergence detector: the {view.size} ranks of tune group "
        f"{view.name!r} would profile different candidate lists for {where}:"
    ]
    groups: dict[str, list[int]] = {}
    for rank, entry in enumerate(entries):
        groups.setdefault(entry["sha256"], []).append(rank)
    for ranks in groups.values():
        names = [view.describe(r).removeprefix("rank ") for r in ranks]
        who = f"rank {names[0]}" if len(names) == 1 else f"ranks {', '.join(names)}"
        bucket = "" if len(buckets) == 1 else f" (bucket {entries[ranks[0]]['bucket']})"
        lines.append(f"  {who}{bucket}: {_list_text(entries[ranks[0]]['tactics'])}")
    lines.append(
        "FlashInfer all-reduces per-tactic timings over the group and needs the same list on "
        "every rank: load the same pin table, FlashInfer and fi_patches settings everywhere "
        "(fi_patches.rank_guard() names what differs)."
    )
    return "\n".join(lines)


def check_candidates(call: fi_tuner.CandidateGateCall) -> None:
    """Compare this gate's candidate list across the tune group; raises on a difference or a
    missing rank, logs (once) and returns on anything else."""
    group = fi_tuner.tune_group()
    if group is None:
        return
    from fi_patches.ranks.exchange import ExchangeTimeout, all_gather, group_view
    from fi_patches.ranks.guard import RankMismatchError, TacticDivergenceError

    try:
        view = group_view(group)
        payloads = all_gather(view, NAMESPACE, _payload(call), TUNING_TIMEOUT)
        entries = [json.loads(p) for p in payloads]
    except ExchangeTimeout as exc:
        who = ", ".join(view.describe(r) for r in exc.missing)
        raise RankMismatchError(
            f"fi_patches tuning divergence detector: {who} did not reach FlashInfer's candidate "
            f"gate for op {call.op!r} within {exc.timeout:g} s",
            missing=exc.missing,
        ) from None
    except Exception:
        log_once(
            logger,
            logging.WARNING,
            "detector-failed",
            "fi_patches' tuning divergence detector could not compare the ranks; tuning goes on",
            exc_info=True,
        )
        return
    if any(e.get("skip") for e in entries) or len({e["sha256"] for e in entries}) == 1:
        return
    mine = entries[view.rank]
    raise TacticDivergenceError(
        divergence_message(view, entries),
        mine["op"],
        mine["runner"],
        mine["bucket"],
        {rank: e["tactics"] for rank, e in enumerate(entries)},
    )


def _operation_gate(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """FlashInfer's operation-phase gate, noting the op being tuned first (wrapt's form)."""
    try:
        operation = fi_tuner.operation_gate_call(args, kwargs)
    except Exception:
        operation = None
    if operation is not None:
        _context.op, _context.runners = operation
        _context.bucket = None
    return wrapped(*args, **kwargs)


def _profile(profile: Any, *args: Any, **kwargs: Any) -> Any:
    """Binds a ``_prepare_input_tensors`` call's profile as FlashInfer's method names it."""
    return profile


def _prepare_inputs(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """FlashInfer's profiling-input builder, noting the bucket first (wrapt's form: ``wrapped``
    is bound to the tuner)."""
    try:
        _context.bucket = fi_tuner.profile_shapes(_profile(*args, **kwargs))
    except Exception:
        _context.bucket = None
    return wrapped(*args, **kwargs)


def _candidate_gate(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """FlashInfer's candidate sync, comparing the candidates across ranks first (wrapt's
    form)."""
    try:
        call = fi_tuner.candidate_gate_call(args, kwargs)
    except Exception:
        call = None
    if call is not None:
        check_candidates(call)
    return wrapped(*args, **kwargs)


def detector_patches() -> list[AttributePatch]:
    """The detector's patches on FlashInfer's tuner, or none (logged once) when an internal
    it needs is missing here."""
    reason = fi_tuner.first_failure(fi_tuner.DETECTOR_PROBES)
    if reason is not None:
        log_once(
            logger,
            logging.WARNING,
            f"detector-unavailable:{reason}",
            "fi_patches' tuning divergence detector is off: %s",
            reason,
        )
        return []
    module = fi_tuner.tuner_module()
    prepare = fi_tuner.PREPARE_INPUTS_NAME.split(".")[1]
    return [
        AttributePatch(module, fi_tuner.OPERATION_GATE, proxied(_operation_gate)),
        AttributePatch(module, fi_tuner.CANDIDATE_GATE, proxied(_candidate_gate)),
        AttributePatch(fi_tuner.tuner_class(), prepare, proxied(_prepare_inputs)),
    ]
