"""Check a pin table against the installed FlashInfer and device, entry by entry: each tactic
valid for its problem and row range, and the meta against what is installed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    FlashInfer has but whose tactic only the tuner can list."""


PIN_MEMBERSHIP = (
    "runner and op found in FlashInfer {version}; whether tactic {tactic} is in the runner's own "
    "list for this key is checked when the tuner first lists it (runners list tactics only for "
    "an op's real inputs, most only on their GPU); a pin it lacks gets the stock list and one error"
)
"""Why a ``[[pin]]`` entry's tactic is unchecked by ``pins check`` on any machine."""


def _describe(section: str, entry: Any) -> tuple[str, str]:
    if not hasattr(entry, "n"):  # a [[pin]]: its op, runner and shapes
        return f"{entry.op} {entry.runner} {entry.shapes.text()}", entry.rows_text
    shape = f"{entry.n}x{entry.k}"
    if hasattr(entry, "rows_text"):
        return shape, entry.rows_text
    return shape, f"tile {entry.tile}"


def check_entries(table: PinTable) -> tuple[str | None, list[EntryCheck]]:
    """The meta problem (or None) and a verdict per entry."""
    from fi_patches.compat.device import current_device
    from fi_patches.compat.evaluate import status_of
    from fi_patches.compat.installed import installed_flashinfer
    from fi_patches.features import feature_of_section
    from fi_patches.pinning.validate import checked_sections, checker_of
    from fi_patches.pins.keys import tactic_text

    meta_problem = table.skip_reason(current_device().arch, installed_flashinfer().version)
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
                text = f"{problem.field} = {problem.value!r}: {problem.message}"
                problems.setdefault(index, text)
        for entry in entries:
            shape, rows = _describe(name, entry)
            tactic = entry.to_mapping()["tactic"]
            applies = False
            if unchecked is not None:
                state, reason = UNCHECKED, unchecked
            elif entry.index in problems:
                state, reason = INVALID, problems[entry.index]
            elif name == "pin":
                state, applies = UNCHECKED, True
                version = installed_flashinfer().version
                reason = PIN_MEMBERSHIP.format(version=version, tactic=tactic_text(entry.tactic))
            else:
                state, reason, applies = OK, "", True
            results.append(
                EntryCheck(name, entry.index, shape, rows, tactic, state, reason, applies)
            )
    return meta_problem, results


@dataclass(frozen=True)
class OpPins:
    """How the ``[[pin]]`` entries of one op fare here: entries, those that apply, those invalid,
    and those not fully checked (a ``[[pin]]`` applies unchecked: see :data:`PIN_MEMBERSHIP`)."""

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
