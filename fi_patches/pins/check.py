"""Check a pin table against the installed FlashInfer and device, entry by entry: each tactic
valid for its problem and row range, and the meta against what is installed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fi_patches._untrusted import value_text
from fi_patches.pins.schema import SECTIONS
from fi_patches.pins.table import PinTable

OK, INVALID, UNCHECKED = "OK", "invalid", "unchecked"


@dataclass(frozen=True)
class EntryCheck:
    """One entry's verdict: ``state`` is OK, invalid or unchecked, with the reason."""

    section: str
    index: int
    shape: str
    rows: str
    tactic: Any
    state: str
    reason: str
    applies: bool = False
    """Whether the entry applies here: OK, or a ``[[pin]]`` whose runner and op the installed
    FlashInfer has but whose tactic only the tuner can list here."""


def _describe(section: str, entry: Any) -> tuple[str, str]:
    if not hasattr(entry, "n"):  # a [[pin]]: its op, runner and shapes
        return f"{entry.op} {entry.runner} {entry.shapes.text()}", entry.rows_text
    shape = f"{entry.n}x{entry.k}"
    if hasattr(entry, "rows_text"):
        return shape, entry.rows_text
    return shape, f"tile {entry.tile}"


def check_meta(table: PinTable) -> tuple[str, str]:
    """``(state, line)`` of the table's ``[meta]`` here (``line`` as ``pins check`` prints it):
    invalid when it was chosen on another device, unchecked when this machine's device cannot
    be known (no CUDA device and no ``FI_PATCHES_DEVICE``): a table is not wrong for a device
    nobody named."""
    from fi_patches.compat.evaluate import installed_flashinfer
    from fi_patches.compat.target import current_device

    device = current_device()
    if device.arch is None and table.meta.device != "*":
        return UNCHECKED, (
            f"unchecked: pins in {table.source} were chosen on {table.meta.device}; which device "
            f"this is cannot be known here ({device.absence}; FI_PATCHES_DEVICE names it)"
        )
    problem = table.skip_reason(device.arch, installed_flashinfer().version)
    return (INVALID, problem) if problem else (OK, OK)


def check_entries(table: PinTable) -> tuple[str | None, list[EntryCheck]]:
    """The meta problem (or None: see :func:`check_meta` for an unchecked meta) and a verdict
    per entry."""
    from fi_patches.compat.evaluate import status_of
    from fi_patches.features import feature_of_section
    from fi_patches.pinning.validate import checked_sections, checker_of
    from fi_patches.pins import membership

    runners = membership.Runners()
    meta_state, meta_reason = check_meta(table)
    meta_problem = meta_reason if meta_state == INVALID else None
    results: list[EntryCheck] = []
    for name in SECTIONS:
        entries = table.entries(name)
        if not entries:
            continue
        owner = feature_of_section(name).name
        record = status_of(owner)
        checker = checker_of(name) if name in checked_sections() else None
        problems: dict[int, str] = {}
        unchecked = None
        if not record.enabled:
            unchecked = f"{owner} is disabled here: {record.reason}"
        elif checker is None:
            unchecked = "no check exists for this section"
        else:
            found = checker(table)
            if name == "pin":
                from fi_patches.pinning.validate import check_pins

                found = check_pins(table, thorough=True)
            for problem in found:
                index = int(problem.where.rsplit("#", 1)[1])
                problems.setdefault(index, problem.detail())
        for entry in entries:
            shape, rows = _describe(name, entry)
            tactic = value_text(entry.to_mapping()["tactic"])
            applies = False
            if unchecked is not None:
                state, reason = UNCHECKED, unchecked
            elif entry.index in problems:
                state, reason = INVALID, problems[entry.index]
            elif name == "pin":
                state, reason, applies = _membership(table, entry, runners)
            else:
                unreached = _unreached(name, entry)
                state, reason, applies = OK, f"warning: {unreached}" if unreached else "", True
            results.append(
                EntryCheck(name, entry.index, shape, rows, tactic, state, reason, applies)
            )
    return meta_problem, results


def _membership(table: PinTable, entry: Any, runners: Any) -> tuple[str, str, bool]:
    """``(state, reason, applies)`` of a ``[[pin]]`` whose runner and op are FlashInfer's: OK or
    invalid where a runner of its class can list its keys' tactics here, else unchecked (it
    applies, and the tuner checks it when it first lists the key) with why not."""
    from fi_patches.pins import membership
    from fi_patches.pins.errors import PinProblem
    from fi_patches.pins.tuner_pin import SECTION

    verdict = membership.check(entry, runners)
    if verdict.member is None:
        return UNCHECKED, verdict.reason, True
    if verdict.member:
        return OK, verdict.reason, True
    where = f"[[{SECTION}]] #{entry.index}"
    problem = PinProblem(
        table.source, where, "tactic", entry.to_mapping()["tactic"], verdict.reason
    )
    return INVALID, problem.detail(), False


def _unreached(section: str, entry: Any) -> str | None:
    """Why no route can use a valid entry (a dead pin), or None. Only ``[[wide]]`` tiles can
    be dead: every low-latency range is served at <= 8 rows, and cute-dsl pins serve FlashInfer's
    own tuner whatever the router does."""
    if section != "wide":
        return None
    from fi_patches.mxfp8.routes import unreached_wide_tile

    return unreached_wide_tile(entry.tile)


@dataclass(frozen=True)
class OpPins:
    """How the ``[[pin]]`` entries of one op fare here: entries, those that apply, those invalid,
    and those not fully checked (a ``[[pin]]`` whose runner cannot list its tactics here applies
    unchecked)."""

    op: str
    entries: int
    applied: int
    invalid: int
    unchecked: int


def pins_per_op(table: PinTable) -> list[OpPins]:
    """Per op of ``table``'s ``[[pin]]`` entries, in op order, how many apply here."""
    from fi_patches.pins.tuner_pin import SECTION

    if not table.entries(SECTION):
        return []
    _, results = check_entries(table)
    by_op: dict[str, list[EntryCheck]] = {}
    entries = {e.index: e for e in table.entries(SECTION)}
    for result in results:
        if result.section == SECTION:
            by_op.setdefault(entries[result.index].op, []).append(result)
    return [
        OpPins(
            op,
            len(checks),
            sum(c.applies for c in checks),
            sum(c.state == INVALID for c in checks),
            sum(c.state == UNCHECKED for c in checks),
        )
        for op, checks in sorted(by_op.items())
    ]
