"""Pinned ``cute-dsl`` MXFP8 tactics: ``pinned_mm`` runs FlashInfer's cute-dsl runner with the
pinned tactic of a row range, without the tuner. A pin that would not run as pinned falls back
to stock ``mm_mxfp8`` with one warning: never a silent substitute, never a crash.

The runner is FlashInfer's ``cute-dsl`` MXFP8 runner as ``mm_mxfp8`` builds it, one per device
and output dtype (0.7.4 caches its factory; earlier releases build a new runner per call).

Whether the cute-dsl runner would run a tactic as given for an exact problem: from 0.7.1 the
runner silently replaces a split-K tactic the split-K kernel cannot run at this M, and any narrow
tile outside its envelope, by its fallback. A pin must run as pinned or not at all, so
:func:`why_not_runnable` asks the runner's own list and FlashInfer's own predicates before
launching.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.features import status_of
from fi_patches.compat.target import current_device
from fi_patches.internals import flashinfer as fi
from fi_patches.pinning.stack import TableLike, tables_in_force
from fi_patches.pins.table import lookup

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
    return plan_with(n, k, rows, out_dtype, inputs, tables_in_force(pins))


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
    return pinned_mm_with(a, a_scale, weight, weight_scale, out_dtype, out, tables_in_force(pins))


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


@functools.lru_cache(maxsize=32)
def cute_dsl_runner(sm_major: int, sm_minor: int, out_dtype: Any) -> Any:
    """The runner ``mm_mxfp8(backend="cute-dsl")`` tunes, with PDL, for ``out_dtype``."""
    return fi.cute_dsl_runner(sm_major, sm_minor, True, out_dtype)


workspace_helper = fi.workspace_helper
workspace = fi.workspace


def why_not_runnable(runner: Any, inputs: list[Any], tactic: Any) -> str | None:
    """None when ``runner`` runs ``tactic`` unchanged on ``inputs``, else the reason. The
    tactic is looked up in the runner's stock list, whatever pins are active here."""
    from fi_patches.internals.cute_dsl import numeric_type
    from fi_patches.pinning import stack
    from fi_patches.pins.keys import as_tactic

    with stack.isolated():  # the stock list, not one narrowed by a block open here
        offered = [as_tactic(t) for t in runner.get_valid_tactics(inputs, None)]
    if tactic not in offered:
        return f"the runner does not offer it here (it offers {len(offered)} tactics)"
    a, b, out = inputs[0], inputs[1], inputs[5]
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    tiler, _, swap_ab, _, split_k = tactic
    if split_k > 1:
        split = fi.split_k_kernel()
        if not out.is_contiguous():
            return "split-K needs a contiguous output"
        if not split.is_valid_tactic(m, k, numeric_type("Float8E4M3FN"), split_k):
            return f"FlashInfer's split-K kernel cannot split K={k} {split_k} ways at M={m}"
        if tuple(split.mma_tiler_mn_for_m(m)) != tiler:
            return f"split-K at M={m} runs tile {split.mma_tiler_mn_for_m(m)}, not {tiler}"
    narrow_ok = fi.narrow_tile_ok()
    if narrow_ok is not None and not narrow_ok(tiler[1], m if swap_ab else n):
        return f"tile N={tiler[1]} is outside FlashInfer's narrow-tile envelope at M={m}"
    return None
