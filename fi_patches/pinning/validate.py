"""Check a pin table against the installed FlashInfer: every tactic must be one FlashInfer's
own enumerator offers for its problem, and every row range must be made of whole tuner buckets
(FlashInfer caches one winner per bucket, so a range splitting one could not be honoured).

Checks always see FlashInfer's stock lists (they run in an isolated pin scope, so a block open
around them does not narrow what the runner offers), and an error FlashInfer raises while
checking an entry is a problem of that entry, never an escaping exception.

:func:`applicable` is what a ``pinned_tactics()`` block and the process-wide pins activate: the
sections of a table whose feature is enabled here, on a table chosen for this device, checked.

The second part of this module holds each pinning feature's behavioural self-check (named by
its declaration in :mod:`fi_patches.compat.features`), run once per process after its probes
pass: the patched FlashInfer must behave as the feature needs on the target device, else the
feature is off with the reason. All are cheap and never cached, except
:func:`wide_tile_compiled`, which compiles a kernel and whose outcome is kept on disk."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches._text import error_text
from fi_patches.compat.features import (
    feature_of_section,
    installed_flashinfer,
    pinned_sections,
    status_of,
)
from fi_patches.compat.target import Device, current_device
from fi_patches.internals import flashinfer as fi
from fi_patches.pinning import stack
from fi_patches.pins.keys import as_tactic, bucket_groups, tactic_json
from fi_patches.pins.reading import PinProblem, PinTableError
from fi_patches.pins.schema import LOW_LATENCY_MAX_ROWS, SECTIONS, RowRangePin
from fi_patches.pins.table import REFRESHED, PinTable, WeakCache, as_table, default_pins

Checker = Callable[[PinTable], list[PinProblem]]

logger = get_logger("fi_patches.pinning.context")
"""The logger of what :func:`applicable` skips, named for the blocks and activation that ask."""


mxfp8_bucket_of = fi.bucket_of


def split_bucket(
    min_rows: int, max_rows: int, groups: list[tuple[int, int]]
) -> tuple[str, int, int] | None:
    """``(field, lo, hi)`` of the first tuner bucket ``lo..hi`` that the range
    ``min_rows..max_rows`` cuts through (``field`` names the end that cuts it), or None."""
    for lo, hi in groups:
        if lo <= max_rows and hi >= min_rows and not (min_rows <= lo and hi <= max_rows):
            return ("min_rows" if lo < min_rows else "max_rows"), lo, hi
    return None


def check_buckets(
    section: str,
    entries: Iterable[RowRangePin],
    source: str,
    bucket_of: Callable[[int], int],
    max_rows: int,
) -> list[PinProblem]:
    """A problem for each entry whose row range cuts through one of the tuner's buckets."""
    groups = bucket_groups(bucket_of, max_rows)
    whole = ", ".join(f"{lo}..{hi}" if lo != hi else str(lo) for lo, hi in groups)
    problems = []
    for entry in entries:
        split = split_bucket(entry.min_rows, entry.max_rows, groups)
        if split is not None:
            field, lo, hi = split
            problems.append(
                PinProblem(
                    source,
                    f"[[{section}]] #{entry.index}",
                    field,
                    getattr(entry, field),
                    f"rows {entry.rows_text} split FlashInfer's tuner bucket of rows "
                    f"{lo}..{hi}, which caches one tactic for all of them; "
                    f"use whole buckets ({whole})",
                )
            )
    return problems


def check_low_latency(table: PinTable) -> list[PinProblem]:
    """Problems of the table's ``[[low_latency]]`` entries against the installed FlashInfer."""
    entries = table.entries("low_latency")
    if not entries:
        return []
    problems = check_buckets(
        "low_latency", entries, table.source, mxfp8_bucket_of(), LOW_LATENCY_MAX_ROWS
    )
    for entry in entries:
        for rows in range(entry.min_rows, entry.max_rows + 1):
            try:
                offered = fi.autotune_tactics(entry.n, entry.k, rows)
            except Exception as exc:
                problems.append(_raised(table, "low_latency", entry, "low-latency enumerator", exc))
                break
            if entry.tactic not in offered:
                sample = ", ".join(str(t) for t in offered[:3]) or "none"
                problems.append(
                    PinProblem(
                        table.source,
                        f"[[low_latency]] #{entry.index}",
                        "tactic",
                        tactic_json(entry.tactic),
                        f"is not among the {len(offered)} tactics FlashInfer's low-latency "
                        f"enumerator offers for n={entry.n} k={entry.k} rows={rows} "
                        f"(e.g. {sample})",
                    )
                )
                break
    return problems


def check_cute_dsl(table: PinTable) -> list[PinProblem]:
    """Problems of the ``[[cute_dsl]]`` entries: whole tuner buckets, and each tactic run as
    pinned by the installed cute-dsl runner at both ends of its row range."""
    import torch

    from fi_patches.compat.target import current_device
    from fi_patches.cute_dsl import cute_dsl_runner, why_not_runnable
    from fi_patches.pinning.serving import mxfp8_runner_inputs

    entries = table.entries("cute_dsl")
    if not entries:
        return []
    top = max(e.max_rows for e in entries)
    problems = check_buckets("cute_dsl", entries, table.source, mxfp8_bucket_of(), top)
    sm = current_device().sm_version or 100
    runner = cute_dsl_runner(sm // 10, sm % 10, torch.bfloat16)
    for entry in entries:
        for rows in dict.fromkeys((entry.min_rows, entry.max_rows)):
            try:
                inputs = mxfp8_runner_inputs(entry.n, entry.k, rows)
                reason = why_not_runnable(runner, inputs, entry.tactic)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                reason = f"FlashInfer's cute-dsl runner could not list its tactics ({error})"
            if reason is not None:
                problems.append(
                    PinProblem(
                        table.source,
                        f"[[cute_dsl]] #{entry.index}",
                        "tactic",
                        entry.to_mapping()["tactic"],
                        f"cannot run as pinned for n={entry.n} k={entry.k} rows={rows}: {reason}",
                    )
                )
                break
    return problems


def check_wide(table: PinTable) -> list[PinProblem]:
    """Problems of the ``[[wide]]`` entries: each tactic must fit its tile on this device."""
    from fi_patches.compat.target import current_device
    from fi_patches.wide.tactics import wide_pin_reason

    arch = f"{current_device().arch or 'sm_100'}a"
    problems = []
    for entry in table.entries("wide"):
        try:
            reason = wide_pin_reason(entry.n, entry.k, entry.tile, entry.tactic, arch=arch)
        except Exception as exc:
            problems.append(_raised(table, "wide", entry, "wide-tile check", exc))
            continue
        if reason is not None:
            problems.append(
                PinProblem(
                    table.source,
                    f"[[wide]] #{entry.index}",
                    "tactic",
                    tactic_json(entry.tactic),
                    f"cannot run n={entry.n} k={entry.k} at tile {entry.tile}: {reason}",
                )
            )
    return problems


def check_pins(table: PinTable, *, thorough: bool = False) -> list[PinProblem]:
    """Problems of the ``[[pin]]`` entries against the installed FlashInfer, from its sources
    (no runner is built, no FlashInfer module imported for it):

    * a runner or op name close to one of FlashInfer's but not it (a misspelling) is a problem,
      with the name it is taken for;
    * a tactic outside the bounds FlashInfer's sources declare for its runner
      (:data:`fi_patches.internals.catalog.TACTIC_RANGES`) is a problem;
    * a runner class neither FlashInfer nor this process has is a problem for a table chosen on
      another release, or ``thorough`` (``pins check``); otherwise it is a consumer's own runner,
      perhaps defined later: the entry loads, with one warning naming such runners;
    * an op a FlashInfer runner is pinned for that FlashInfer does not tune is a problem on the
      same terms (a warning otherwise).

    Each problem names the entry's key (op, runner, shapes, rows), so a listing of them says
    what is left unpinned. Membership of each tactic in its runner's own list is checked when the
    tuner first lists that key, entry by entry (a runner lists tactics only for an op's real
    inputs)."""
    from fi_patches.compat.features import installed_flashinfer
    from fi_patches.internals.catalog import catalog
    from fi_patches.pins.keys import SECTION

    entries = table.entries(SECTION)
    if not entries:
        return []
    found = catalog()
    if found is None:
        return []
    strict = thorough or table.other_release(installed_flashinfer().version) is not None
    runners: dict[str, tuple[bool, str | None]] = {}
    ops: dict[str, tuple[bool, str | None]] = {}
    unlike: dict[str, None] = {}
    problems = []
    for entry in entries:
        where = f"[[{SECTION}]] #{entry.index}"
        key = f"(its key: {entry.describe()})"
        if entry.runner not in runners:
            known = found.runner_known(entry.runner)
            runners[entry.runner] = (known, None if known else found.close_runner(entry.runner))
        runner_known, runner_close = runners[entry.runner]
        if not runner_known:
            if runner_close is not None or strict:
                hint = f"; did you mean {runner_close}?" if runner_close else ""
                problems.append(
                    PinProblem(
                        table.source,
                        where,
                        "runner",
                        entry.runner,
                        "is not a runner class of the installed FlashInfer (nor of this process)"
                        f"{hint} {key}",
                    )
                )
            else:
                unlike.setdefault(f"runner {entry.runner}")
            continue
        if entry.runner in found.classes:
            if entry.op not in ops:
                known = found.op_known(entry.op)
                ops[entry.op] = (known, None if known else found.close_op(entry.op))
            op_known, op_close = ops[entry.op]
            if not op_known and (op_close is not None or strict):
                hint = f"; did you mean {op_close}?" if op_close else ""
                problems.append(
                    PinProblem(
                        table.source,
                        where,
                        "op",
                        entry.op,
                        f"is not an op the installed FlashInfer tunes (its {entry.runner} is "
                        f"there){hint} {key}",
                    )
                )
                continue
            if not op_known:
                unlike.setdefault(f"op {entry.op!r}")
        bound = found.bounds.get(entry.runner)
        tactic = entry.tactic
        if bound is not None and (
            isinstance(tactic, bool) or not isinstance(tactic, int) or not 0 <= tactic < bound.count
        ):
            problems.append(
                PinProblem(
                    table.source,
                    where,
                    "tactic",
                    tactic_json(tactic),
                    f"must be an integer 0..{bound.count - 1}: {entry.runner}'s tactics "
                    f"{bound.what}, at most {bound.source} {key}",
                )
            )
    if unlike and not strict:
        _warn_unlike(table, list(unlike))
    return problems


def _warn_unlike(table: PinTable, names: list[str]) -> None:
    """One warning naming the runners (and ops) of ``table`` that are like none of FlashInfer's:
    a consumer's own, defined later, or a name nothing will ever run."""
    import logging

    from fi_patches._logging import get_logger, log_once

    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    log_once(
        get_logger(__name__),
        logging.WARNING,
        f"unlike:{table.source}:{shown}",
        "fi_patches: %s pins %s: like nothing the installed FlashInfer has, nor defined in this "
        "process yet (a runner of your own?); those entries serve once such a runner runs",
        table.source,
        shown,
    )


def _raised(table: PinTable, section: str, entry: Any, what: str, exc: Exception) -> PinProblem:
    return PinProblem(
        table.source,
        f"[[{section}]] #{entry.index}",
        "tactic",
        entry.to_mapping()["tactic"],
        f"could not be checked: FlashInfer's {what} raised {error_text(exc, 200)}",
    )


def _against_stock(section: str, checker: Checker) -> Checker:
    """``checker`` run in an isolated pin scope (FlashInfer's stock lists, whatever blocks are
    open here); anything it raises becomes a problem of each entry it was checking."""

    @functools.wraps(checker)
    def check(table: PinTable) -> list[PinProblem]:
        try:
            with stack.isolated():
                return checker(table)
        except Exception as exc:
            return [_raised(table, section, e, "check", exc) for e in table.entries(section)]

    return check


def checker_of(section: str) -> Checker:
    """The check of ``section``'s entries, as its feature declares it, against stock lists."""
    from fi_patches.compat.features import feature_of_section, load

    return _against_stock(section, load(feature_of_section(section).checker))


def checked_sections() -> tuple[str, ...]:
    """Every section some feature checks."""
    from fi_patches.compat.features import FEATURES

    return tuple(s for f in FEATURES if f.checker for s in f.sections)


_checked: WeakCache[PinTable, tuple[str, ...]] = WeakCache(REFRESHED)
"""Per table, the sections found valid on the installed FlashInfer (checked again after
``fi_patches.refresh()``)."""
_lock = threading.Lock()


def table_problems(table: PinTable, sections: Iterable[str] | None = None) -> list[PinProblem]:
    """Every problem of the entries of ``sections`` (default: all with a checker) on the
    installed FlashInfer."""
    wanted = tuple(sections) if sections is not None else checked_sections()
    problems: list[PinProblem] = []
    for section in wanted:
        if table.entries(section) and section in checked_sections():
            problems.extend(checker_of(section)(table))
    return problems


def check_table(table: PinTable, sections: Iterable[str] | None = None) -> PinTable:
    """The table to apply: ``table`` itself when every entry of ``sections`` (default: all with
    a checker) is valid on the installed FlashInfer. An invalid entry raises
    :class:`PinTableError` naming each one, unless ``[meta] on_invalid = "tune"``: the table is
    then applied without them, with one warning listing them. A table passes once per process.
    """
    wanted = tuple(sections) if sections is not None else checked_sections()
    with _lock:
        done = _checked.fresh().get(table, ())
    todo = [s for s in wanted if s not in done and table.entries(s)]
    problems = table_problems(table, todo)
    if problems:
        if table.meta.on_invalid != "tune":
            raise PinTableError(problems)
        return _without_invalid(table, problems)
    with _lock:
        _checked.fresh()[table] = tuple(sorted(set(done) | set(wanted)))
    return table


def _without_invalid(table: PinTable, problems: list[PinProblem]) -> PinTable:
    import logging

    from fi_patches._logging import get_logger, log_once

    dropped: dict[str, set[int]] = {}
    for problem in problems:
        section, _, number = problem.where.partition(" #")
        if number.isdigit():
            dropped.setdefault(section.strip("[]"), set()).add(int(number))
    listed = "; ".join(str(p) for p in problems[:20])
    more = f"; and {len(problems) - 20} more" if len(problems) > 20 else ""
    log_once(
        get_logger(__name__),
        logging.WARNING,
        f"on_invalid:{table.source}:{listed}",
        "fi_patches applies %s without %d invalid entries (on_invalid = 'tune': FlashInfer "
        "tunes their keys): %s%s",
        table.source,
        sum(len(v) for v in dropped.values()),
        listed,
        more,
    )
    kept = table.without(dropped)
    with _lock:
        _checked.fresh()[kept] = checked_sections()
    return kept


# the table pins activate: the sections of it that apply here, checked ----------

_views: WeakCache[PinTable, dict[tuple[str, ...], PinTable]] = WeakCache(REFRESHED)
_views_lock = threading.Lock()


def _view(table: PinTable, sections: tuple[str, ...]) -> PinTable:
    """``table`` restricted to ``sections`` (one object per table and sections)."""
    if all(not table.entries(s) for s in SECTIONS if s not in sections):
        return table
    with _views_lock:
        views = _views.fresh().setdefault(table, {})
        view = views.get(sections)
        if view is None:
            view = PinTable(table.meta, {s: table.entries(s) for s in sections}, table.source)
            views[sections] = view
        return view


def applicable(
    table: PinTable | str | os.PathLike[str] | Mapping[str, object] | None,
    who: str = "fi_patches.pinned_tactics()",
) -> tuple[PinTable | None, tuple[str, ...]]:
    """The table to activate and the sections of it that apply here; ``(None, ())`` when
    nothing applies (the reasons are logged once, led by ``who``: what the user did that
    asked for the pins, such as a ``pinned_tactics()`` block or process-wide pins)."""
    resolved = default_pins() if table is None else as_table(table)
    suspended = stack.suspended()
    if suspended is not None:
        log_once(
            logger,
            logging.WARNING,
            f"suspended:{suspended}",
            "fi_patches pins nothing: pins are suspended (%s); fi_patches.enable() resumes them",
            suspended,
        )
        return None, ()
    wanted = tuple(s for s in pinned_sections() if resolved.entries(s))
    if not wanted:
        return None, ()
    sections, ignored = [], []
    for section in wanted:
        record = status_of(feature_of_section(section).name)
        if record.enabled:
            sections.append(section)
        else:
            ignored.append(f"[[{section}]] ({record.name} {record.reason})")
    if ignored:
        log_once(
            logger,
            logging.WARNING,
            "disabled:" + ";".join(ignored),
            "%s ignores the %s pins: %s",
            who,
            "/".join(s.split(" ")[0] for s in ignored),
            "; ".join(ignored),
        )
    if not sections:
        return None, ()
    skip = resolved.skip_reason(current_device().arch)
    if skip is not None:
        log_once(
            logger,
            logging.WARNING,
            f"skip:{skip}",
            "%s skips a table: %s",
            who,
            skip,
        )
        return None, ()
    upgrade = resolved.other_release(installed_flashinfer().version)
    if upgrade is not None:
        log_once(logger, logging.INFO, f"upgrade:{upgrade}", "fi_patches: %s", upgrade)
    checked = check_table(resolved, sections)
    return _view(checked, tuple(sections)), tuple(sections)


# the features' self-checks ----------

_SMALL = (512, 1024)
"""``(n, k)`` of the problems the tuner self-checks pin."""


def offers_exactly_the_pin(
    runner: Any, inputs: list[Any], section: str, n: int, k: int, rows: int, feature: str
) -> str | None:
    """With the engine's wrappers installed, ``runner`` offers its stock list, then only
    a pinned tactic of it, then its stock list again; else the reason it does not."""
    from fi_patches.pinning.installation import hold_for

    held = hold_for((type(runner).__name__,))
    try:
        with stack.isolated():
            stock = [as_tactic(t) for t in runner.get_valid_tactics(inputs, None)]
        if not stock:
            return (
                f"FlashInfer's runner offers no tactics for an MXFP8 {n}x{k} problem at {rows} rows"
            )
        pin = stock[-1]
        entry = {"n": n, "k": k, "min_rows": 1, "max_rows": rows, "tactic": tactic_json(pin)}
        table = PinTable.from_mapping(
            {"meta": {"device": "*", "flashinfer": ""}, section: [entry]}, source="<self-check>"
        )
        with stack.isolated(table):
            pinned = list(runner.get_valid_tactics(inputs, None))
        if pinned != [pin]:
            return (
                f"with {pin} pinned the real runner offered {len(pinned)} tactics, so the patch "
                "does not reach it"
            )
        with stack.isolated():
            again = list(runner.get_valid_tactics(inputs, None))
        if again != stock:
            return "the runner's stock tactics changed after a pinned call"
    finally:
        held.release()
    return None


def pinned_tactics(device: Device) -> str | None:
    """The low-latency runner of ``device`` takes the pin."""
    from fi_patches.pinning.serving import mxfp8_runner_inputs

    n, k = _SMALL
    rows = 8
    runner = fi.low_latency_runner(device.sm_version or 0, True)
    return offers_exactly_the_pin(
        runner, mxfp8_runner_inputs(n, k, rows), "low_latency", n, k, rows, fi.PINNED_TACTICS
    )


def pinned_cute_dsl(device: Device) -> str | None:
    """The cute-dsl runner of ``device`` takes the pin (its tactic list reads the CUDA device's
    SM count, so this needs the device)."""
    import torch

    from fi_patches.cute_dsl import cute_dsl_runner
    from fi_patches.pinning.serving import mxfp8_runner_inputs

    sm = device.sm_version or 0
    runner = cute_dsl_runner(sm // 10, sm % 10, torch.bfloat16)
    n, k = _SMALL
    rows = 64
    try:
        return offers_exactly_the_pin(
            runner, mxfp8_runner_inputs(n, k, rows), "cute_dsl", n, k, rows, fi.PINNED_CUTE_DSL
        )
    except Exception as exc:
        if not torch.cuda.is_available() and _is_device_query(exc):
            return (
                "FlashInfer's cute-dsl runner reads the CUDA device's SM count to list its "
                f"tactics, so it cannot be checked without the device ({type(exc).__name__})"
            )
        raise


def _is_device_query(exc: BaseException) -> bool:
    """Whether ``exc`` is CPU-only torch refusing a CUDA device query (what the cute-dsl
    runner's SM-count read raises without a device), rather than anything else going wrong."""
    text = str(exc)
    return "CUDA" in text or "cuda" in text or "NVIDIA" in text


WIDE_CHECK_TILE = 16


def wide_tile(device: Device) -> str | None:
    """FlashInfer's kernel class accepts a wide tactic for a 7168x1536 weight at a 16-row tile
    on the device (the cheap part, run in every process)."""
    from fi_patches.wide.tactics import wide_tactics

    if not wide_tactics(7168, 1536, WIDE_CHECK_TILE, arch=f"{device.arch}a"):
        return f"no valid wide tactic for a 7168x1536 weight at tile {WIDE_CHECK_TILE}"
    return None


def wide_tile_compiled(device: Device) -> str | None:
    """FlashInfer's kernel class, subclassed, compiles a 16-row tile for the device, and its PTX
    issues the MMA with N = 16 and keeps the PDL ordering (cached: a compile)."""
    from fi_patches.wide.kernel import compile_wide
    from fi_patches.wide.ptx import descriptors, parse_entry, pdl_order
    from fi_patches.wide.tactics import wide_tactics

    arch = f"{device.arch}a"
    tactics = wide_tactics(7168, 1536, WIDE_CHECK_TILE, arch=arch)
    if not tactics:
        return f"no valid wide tactic for a 7168x1536 weight at tile {WIDE_CHECK_TILE}"
    kernel = compile_wide(WIDE_CHECK_TILE, tactics[0], arch=arch)
    if kernel.ptx is None:
        return "the DSL kept no PTX for the compiled kernel"
    entry = parse_entry(kernel.ptx)
    widths = {d.n for choices in descriptors(entry) for d in choices}
    if widths != {WIDE_CHECK_TILE}:
        return (
            f"the compiled MMA runs N = {sorted(widths)}, not the requested tile {WIDE_CHECK_TILE}"
        )
    order = pdl_order(entry)
    if not order.ok:
        return f"the compiled kernel lost its PDL ordering ({order})"
    return None


def _probe_table(mode_note: str) -> Any:
    from fi_patches.internals import tuner as fi_tuner

    pin = {
        "op": fi_tuner.PROBE_OP,
        "runner": fi_tuner.probe_runner_class().__name__,
        "shapes": [["rows", 64], [64, 32]],
        "min_rows": 1,
        "max_rows": 8,
        "tactic": [1, 2],
    }
    return PinTable.from_mapping(
        {"meta": {"device": "*", "flashinfer": ""}, "pin": [pin]}, source=f"<{mode_note}>"
    )


def _probe_call() -> tuple[Any, list[Any], Any]:
    import torch

    from fi_patches.internals import tuner as fi_tuner

    runner = fi_tuner.probe_runner_class()()
    inputs = [torch.empty(6, 64), torch.empty(64, 32)]
    return runner, inputs, fi_tuner.tuner()


def pinned_ops(device: Device) -> str | None:
    """A ``[[pin]]`` for a runner of fi_patches' own (as any new FlashInfer op's would be)
    reaches it: it offers its stock list, then only the pin for a key in the pinned range,
    its stock list for a key outside it, and its stock list again after."""
    from fi_patches.pinning.installation import hold_for

    runner, inputs, _ = _probe_call()
    held = hold_for((type(runner).__name__,))
    try:
        stock = list(runner.get_valid_tactics(inputs, None))
        with stack.isolated(_probe_table("self-check")):
            pinned = list(runner.get_valid_tactics(inputs, None))
            wide = list(runner.get_valid_tactics([inputs[0].new_empty(16, 64), inputs[1]], None))
        if pinned != [(1, 2)]:
            return f"a [[pin]] of (1, 2) made the runner offer {pinned}, so the patch misses it"
        if wide != stock:
            return f"a key outside the pinned rows was offered {wide}, not the stock {stock}"
        if list(runner.get_valid_tactics(inputs, None)) != stock:
            return "the runner's stock tactics changed after a pinned call"
    finally:
        held.release()
    return None


def preseed(device: Device) -> str | None:
    """Inside a preseed scope FlashInfer's own cache lookup returns the pin for a pinned key
    of fi_patches' probe op, and misses outside it, writing nothing into the tuner's cache."""
    from fi_patches.internals import tuner as fi_tuner
    from fi_patches.pinning.index import PRESEED
    from fi_patches.pinning.installation import hold_for

    runner, inputs, instance = _probe_call()
    shapes = tuple(tuple(t.shape) for t in inputs)
    config = fi_tuner.probe_config()
    winners = dict(fi_tuner.live_winners(instance))
    held = hold_for((type(runner).__name__,))
    try:
        with stack.isolated(_probe_table("self-check"), mode=PRESEED):
            hit = instance.search_cache(fi_tuner.PROBE_OP, [runner], shapes, config, inputs)
        miss = instance.search_cache(fi_tuner.PROBE_OP, [runner], shapes, config, inputs)
    finally:
        held.release()
    if not (hit[0] and tuple(hit[2]) == (1, 2)):
        return f"FlashInfer's cache lookup returned {hit[:3]} for a preseeded (1, 2)"
    if miss[0]:
        return f"after the scope FlashInfer's cache lookup still hit ({miss[:3]})"
    if dict(fi_tuner.live_winners(instance)) != winners:
        return "the lookups changed FlashInfer's cache"
    return None
