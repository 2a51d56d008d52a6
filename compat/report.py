"""Render ``compat/RESULTS.md`` from the cells' result records: a release x feature table with
each state (and the reason where disabled), test outcome counts, problems, and wall times."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from compat.matrix import Cell, CellCheck, Matrix, Verdict, check_cell
from compat.outcomes import (
    OUTCOMES,
    cases_from_dicts,
    counts,
    describe_counts,
    failing_files,
)

MESSAGE_WIDTH = 200


def _cell_text(text: str) -> str:
    """``text`` made safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _short(text: str, width: int = MESSAGE_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _verdict_text(verdict: Verdict) -> str:
    mark = "✓" if verdict.ok else "✗"
    if verdict.observed is None:
        return f"{mark} not reported by doctor"
    probes = f" ({verdict.probes_ok}/{verdict.probes_total} probes)" if verdict.probes_total else ""
    text = f"{mark} **{verdict.state}**{probes}"
    if not verdict.observed:
        text += f": {verdict.reason}"
    if not verdict.ok and verdict.expected is not None:
        text += f" — expected {verdict.expected.describe()}"
    return _cell_text(text)


def _seconds(value: float) -> str:
    value = float(value or 0)
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"


def _finished(result: Mapping[str, Any]) -> float | None:
    """When the cell finished (epoch seconds), from ``finished_ts`` or the ``finished`` stamp."""
    if result.get("finished_ts"):
        return float(result["finished_ts"])
    try:
        return datetime.strptime(str(result.get("finished")), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def _label(cell: Cell) -> str:
    return f"`{cell.id}`"


def _suite(cell: Cell) -> str:
    if cell.suite:
        return f"{cell.suite} ({len(cell.tests)} paths)"
    return f"{len(cell.tests)} paths" if cell.tests else "whole"


def render(
    matrix: Matrix,
    results: Mapping[str, Mapping[str, Any]],
    *,
    base: Mapping[str, Any] | None = None,
    run: Mapping[str, Any] | None = None,
    machine: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> tuple[str, list[str]]:
    """The Markdown text and every problem (``cell: problem``); a cell without a result is a
    problem too."""
    now = time.time() if now is None else now
    checks: dict[str, CellCheck] = {}
    problems: list[str] = []
    for cell in matrix.cells:
        result = results.get(cell.id)
        if result is None:
            problems.append(f"{cell.id}: not run")
            continue
        check = check_cell(matrix, cell, result)
        alias = result.get("alias_of")
        if (
            alias
            and matrix.cells_for(alias)
            and not any(results.get(c.id) for c in matrix.cells_for(alias))
        ):
            check.problems.append(f"newest is {alias}, whose cells were not run")
        checks[cell.id] = check
        problems += [f"{cell.id}: {p}" for p in check.problems]

    out: list[str] = ["# Compat matrix results", ""]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now))
    where = ""
    if machine:
        where = (
            f" on Python {machine.get('python')}, {machine.get('platform')}, "
            f"{machine.get('cpus')} CPUs, no GPU"
        )
    torch = f"; torch {base['torch']}" if base and base.get("torch") else ""
    out.append(
        f"Generated {stamp} by `nox -s matrix` from `compat/matrix.toml`{where}{torch}; "
        f"doctor runs with `FI_PATCHES_DEVICE={matrix.device}`. Do not edit: rerun the matrix."
    )
    newest = [results[c.id] for c in matrix.cells if c.is_newest and c.id in results]
    for result in newest[:1]:
        if result.get("alias_of"):
            out.append(
                f"Newest flashinfer-python on the registry: **{result.get('flashinfer')}**, "
                f"already listed (row `{result['alias_of']}`)."
            )
        elif result.get("flashinfer"):
            out.append(
                f"Newest flashinfer-python on the registry: **{result.get('flashinfer')}**, "
                "not listed: run as the `newest` row, also with FI_PATCHES_ALLOW_UNVERIFIED=1."
            )
    out.append("")
    ran = len(checks)
    if problems:
        out.append(
            f"**{len(problems)} problem(s)** in {ran} of {len(matrix.cells)} cells run; "
            "see Problems."
        )
    else:
        out.append(f"**All {ran} cells match `compat/matrix.toml`.**")
    out.append("")

    # Release x feature.
    out += ["## Features", ""]
    out.append("✓ = as `matrix.toml` expects, ✗ = not. Reasons are the compat layer's, verbatim.")
    out.append("")
    out.append("| cell | flashinfer | " + " | ".join(matrix.features) + " | tests |")
    out.append("|---" * (len(matrix.features) + 3) + "|")
    for cell in matrix.cells:
        result = results.get(cell.id)
        if result is None:
            out.append(
                f"| {_label(cell)} | — | "
                + " | ".join("not run" for _ in matrix.features)
                + " | — |"
            )
            continue
        installed = result.get("flashinfer") or "—"
        if result.get("alias_of"):
            same = f"same as row `{result['alias_of']}` (newest is a listed release)"
            out.append(
                f"| {_label(cell)} | {installed} | "
                + " | ".join(same for _ in matrix.features)
                + " | — |"
            )
            continue
        if result.get("error"):
            err = _cell_text(f"✗ setup failed: {_short(result['error'])}")
            out.append(
                f"| {_label(cell)} | {installed} | "
                + " | ".join(err for _ in matrix.features)
                + " | — |"
            )
            continue
        check = checks[cell.id]
        by_name = {v.feature: v for v in check.verdicts}
        states = [_verdict_text(by_name[f]) if f in by_name else "—" for f in matrix.features]
        cases = cases_from_dicts((result.get("tests") or {}).get("cases", []))
        tests = describe_counts(counts(cases)) if cases else "—"
        out.append(f"| {_label(cell)} | {installed} | " + " | ".join(states) + f" | {tests} |")
        if check.allow_verdicts:
            allow = {v.feature: v for v in check.allow_verdicts}
            states = [_verdict_text(allow[f]) if f in allow else "—" for f in matrix.features]
            out.append(
                f"| {_label(cell)} + `FI_PATCHES_ALLOW_UNVERIFIED=1` | {installed} | "
                + " | ".join(states)
                + " | (doctor only) |"
            )
    out.append("")

    # Tests.
    out += ["## Tests", ""]
    out.append(
        "The README's tests (`python -m pytest -q`, on one worker) in each cell, on the cell's "
        'suite (`[suites]` in `matrix.toml`; "whole" where a cell names none). "disabled-skip" '
        "counts tests skipped by `require_feature` with the compat layer's reason (checked "
        "against the matrix)."
    )
    out.append("")
    out.append(
        "| cell | suite | "
        + " | ".join(OUTCOMES)
        + " | disabled-skip | failing or erroring files |"
    )
    out.append("|---" * (len(OUTCOMES) + 4) + "|")
    for cell in matrix.cells:
        result = results.get(cell.id)
        if result is None or result.get("alias_of") or result.get("error"):
            continue
        cases = cases_from_dicts((result.get("tests") or {}).get("cases", []))
        numbers = counts(cases)
        disabled = sum(
            1 for c in cases if c.outcome == "skipped" and " is disabled here: " in c.message
        )
        files = failing_files(cases)
        listed = ", ".join(f"`{f}` ({len(v)})" for f, v in sorted(files.items())) or "—"
        out.append(
            f"| {_label(cell)} | {_suite(cell)} | "
            + " | ".join(str(numbers[o]) for o in OUTCOMES)
            + f" | {disabled} | {listed} |"
        )
    out.append("")

    failing = []
    for cell in matrix.cells:
        result = results.get(cell.id) or {}
        cases = cases_from_dicts((result.get("tests") or {}).get("cases", []))
        bad = [c for c in cases if c.outcome in ("failed", "error")]
        if bad:
            failing.append(f"- {_label(cell)}:")
            for c in bad:
                known = cell.known(c)
                note = f" — known failure: {known.why}" if known else ""
                failing.append(f"  - `{c.nodeid}` ({c.outcome}): {_short(c.message)}{note}")
    if failing:
        out += ["### Failing tests", "", *failing, ""]

    other = {}
    for cell in matrix.cells:
        result = results.get(cell.id) or {}
        for case in cases_from_dicts((result.get("tests") or {}).get("cases", [])):
            if case.outcome == "skipped" and " is disabled here: " not in case.message:
                other.setdefault(_short(case.message, 140), []).append(cell.id)
    if other:
        out += ["### Other skips", ""]
        for message, cells in sorted(other.items()):
            ids = ", ".join(f"`{c}`" for c in dict.fromkeys(cells))
            out.append(f"- {_cell_text(message)} — {len(cells)} times in {ids}")
        out.append("")

    # Problems.
    out += ["## Problems", ""]
    out += [f"- {_cell_text(p)}" for p in problems] or ["None."]
    out.append("")

    # Time.
    out += ["## Wall time", ""]
    out.append(
        "Per cell: environment setup (install FlashInfer and the project into a venv that sees "
        "the shared torch base; once per release, on its first cell), test suite, doctor run(s)."
    )
    out.append("")
    out.append("| cell | setup | tests | doctor | total |")
    out.append("|---|---|---|---|---|")
    total = 0.0
    if base and base.get("seconds") is not None:
        out.append(
            f"| base environment (torch + shared dependencies) | {_seconds(base['seconds'])} "
            f"| | | {_seconds(base['seconds'])} |"
        )
        total += float(base["seconds"])
    for cell in matrix.cells:
        timing = (results.get(cell.id) or {}).get("timing")
        if not timing:
            continue
        cell_total = float(timing.get("setup_s", 0)) + float(timing.get("cell_s", 0))
        total += cell_total
        out.append(
            f"| {_label(cell)} | {_seconds(timing.get('setup_s', 0))} | "
            f"{_seconds(timing.get('tests_s', 0))} | {_seconds(timing.get('doctor_s', 0))} | "
            f"{_seconds(cell_total)} |"
        )
    out.append(f"| **sum** | | | | **{_seconds(total)}** |")
    if run and run.get("started"):
        # From the start to the last cell's end, so re-rendering later gives the same figure.
        ends = [t for t in (_finished(r) for r in results.values()) if t is not None]
        end = max(ends) if ends else now
        out.append("")
        out.append(
            f"Whole matrix, wall clock from `nox -s matrix` start to the last cell's end: "
            f"**{_seconds(end - float(run['started']))}** "
            "(includes venv creation, which the rows omit)."
        )
    out.append("")

    # Cells.
    out += ["## Cells", ""]
    for cell in matrix.cells:
        expected = {}
        for feature, expectation in cell.expect.items():
            expected.setdefault(expectation.name, []).append(feature)
        summary = "; ".join(f"{name} ({', '.join(f)})" for name, f in expected.items())
        out.append(f"- {_label(cell)} — expects {summary}. {_cell_text(cell.why)}")
    out.append("")
    return "\n".join(out), problems
