"""``pinned_mm``: an MXFP8 GEMM on FlashInfer's cute-dsl runner with the pinned tactic of its
row range, without the tuner. A pin that would not run as pinned falls back to stock
``mm_mxfp8`` with one warning: never a silent substitute, never a crash."""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.evaluate import status_of
from fi_patches.compat.target import current_device
from fi_patches.cute_dsl.runner import cute_dsl_runner, workspace
from fi_patches.cute_dsl.validity import why_not_runnable
from fi_patches.pinning.resolve import TableLike, candidate_tables
from fi_patches.pinning.stack import lookup

logger = get_logger(__name__)

FEATURE = "pinned_cute_dsl"


@dataclass(frozen=True)
class Plan:
    """How ``pinned_mm`` runs one problem: ``tactic`` on ``runner``, or stock with ``reason``."""

    tactic: Any
    runner: Any
    reason: str


_plans: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Plan]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _capability(device: Any) -> tuple[int, int] | None:
    """The arch a problem on ``device`` runs on: a CUDA device's own (FlashInfer's reading),
    else the target of fi_patches' device model (``FI_PATCHES_DEVICE`` off the GPU, as
    ``doctor`` and ``pins check`` read it), or None when there is none."""
    if getattr(device, "type", None) == "cuda":
        from fi_patches.internals import flashinfer as fi

        return fi.compute_capability(device)
    sm = current_device().sm_version
    return None if sm is None else (sm // 10, sm % 10)


def plan(
    n: int, k: int, rows: int, out_dtype: Any, inputs: list[Any], pins: TableLike | None = None
) -> Plan:
    """The plan for ``rows`` rows of weight ``(n, k)``: decided once per table and problem."""
    return plan_with(n, k, rows, out_dtype, inputs, candidate_tables(pins))


def plan_with(
    n: int, k: int, rows: int, out_dtype: Any, inputs: list[Any], tables: tuple[Any, ...]
) -> Plan:
    """:func:`plan` over pin tables already resolved."""
    record = status_of(FEATURE)
    if not record.enabled:
        reason = f"{FEATURE} is disabled: {record.reason}"
        log_once(
            logger,
            logging.WARNING,
            f"disabled:{reason}",
            "fi_patches runs stock mm_mxfp8: %s",
            reason,
        )
        return Plan(None, None, reason)
    entry, owner = None, None
    for table in tables:
        entry = lookup((table,), "cute_dsl", n, k, rows)
        if entry is not None:
            owner = table
            break
    if entry is None or owner is None:
        return Plan(None, None, f"no [[cute_dsl]] pin covers n={n} k={k} rows={rows}")
    out = inputs[5]
    key = (n, k, rows, out_dtype, out.is_contiguous(), str(inputs[0].device))
    with _lock:
        cached = _plans.setdefault(owner, {}).get(key)
    if cached is not None:
        return cached
    where = f"{owner.source} [[cute_dsl]] #{entry.index}"
    runner = None
    try:
        capability = _capability(inputs[0].device)
        if capability is None:
            problem: str | None = f"there is no target device ({current_device().detail})"
        else:
            runner = cute_dsl_runner(*capability, out_dtype)
            problem = why_not_runnable(runner, inputs, entry.tactic)
    except Exception as exc:
        problem = f"checking it raised {type(exc).__name__}: {exc}"
    if problem is None:
        made = Plan(entry.tactic, runner, f"pinned by {where}")
    else:
        made = Plan(
            None,
            None,
            f"pin {entry.tactic} of {where} cannot run n={n} k={k} rows={rows}: {problem}",
        )
        log_once(
            logger,
            logging.WARNING,
            f"invalid:{where}:{key}",
            "fi_patches runs stock mm_mxfp8 instead: %s",
            made.reason,
        )
    with _lock:
        _plans.setdefault(owner, {})[key] = made
    return made


def pinned_mm(
    a: Any,
    a_scale: Any,
    weight: Any,
    weight_scale: Any,
    *,
    out_dtype: Any = None,
    out: Any = None,
    pins: TableLike | None = None,
) -> Any:
    """``a @ weight`` on the cute-dsl runner with the pinned tactic, no tuner.

    ``a`` is ``(rows, K)`` E4M3 with 1-D swizzled 128x4 scales ``a_scale``; ``weight`` is what
    ``mm_mxfp8`` takes as ``b``: the ``(K, N)`` column-major view of an ``(N, K)`` E4M3 weight,
    with its 1-D swizzled scales. Without a pin covering the rows, with the feature off, or with
    a pin that would not run as pinned here, this is stock ``mm_mxfp8(backend="cute-dsl")``.
    """
    return pinned_mm_with(a, a_scale, weight, weight_scale, out_dtype, out, candidate_tables(pins))


def pinned_mm_with(
    a: Any,
    a_scale: Any,
    weight: Any,
    weight_scale: Any,
    out_dtype: Any,
    out: Any,
    tables: tuple[Any, ...],
) -> Any:
    """:func:`pinned_mm` over pin tables already resolved (``mxfp8.mm``'s route holds them)."""
    import torch

    from fi_patches.internals import flashinfer as fi

    out_dtype = out_dtype or torch.bfloat16
    rows, k = a.shape
    n = weight.shape[1]
    if out is None:
        out = torch.empty(rows, n, dtype=out_dtype, device=a.device)
    inputs = [a, weight, a_scale, weight_scale, out_dtype, out, None]
    chosen = plan_with(n, k, rows, out_dtype, inputs, tables)
    if chosen.tactic is None:
        return fi.mm_mxfp8()(
            a, weight, a_scale, weight_scale, out=out, out_dtype=out_dtype, backend="cute-dsl"
        )
    inputs[6] = workspace(a.device)
    chosen.runner(inputs=inputs, tactic=chosen.tactic)
    return out
