"""Runs the selected drift cases once per session, on parallel zygotes, and prints the coverage
line (``drift: <n> internals, <m> mutations, <m> cases, all clean``) in the terminal summary; the
line also goes to ``$DRIFT_REPORT`` if set, else ``.pytest_cache/d/drift/coverage.txt``, beside
every observation (``results.json``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.drift import pool
from tests.drift.cases import BASELINE, Case, all_cases, coverage
from tests.drift.verdict import collateral, not_applicable, problems

REPORT_ENV = "DRIFT_REPORT"
"""A file to write the coverage line to (CI logs and the compat matrix can pick it up)."""


@dataclass(repr=False)
class Drift:
    """The session's drift run: observations, and each case's problems once judged."""

    results: pool.Results | None = None
    skipped: str = ""
    cases: list[Case] = field(default_factory=list)
    verdicts: dict[str, list[str]] = field(default_factory=dict)
    collateral: dict[str, list[str]] = field(default_factory=dict)
    directory: Path | None = None

    def __repr__(self) -> str:
        return f"<drift run of {len(self.cases)} cases>"

    def observation(self, name: str) -> dict[str, Any]:
        assert self.results is not None
        return self.results.observations[name]

    def judge(self, case: Case) -> list[str]:
        """``case``'s problems (recorded for the coverage line)."""
        observation, baseline = self.observation(case.id), self.observation(BASELINE)
        found = problems(case, observation, baseline)
        self.verdicts[case.id] = found
        if not found:
            self.collateral[case.id] = collateral(case, observation, baseline)
        return found

    def coverage_line(self) -> str:
        internals, mutations = coverage()
        total = len(all_cases())
        ran = len(self.cases)
        counted = f"{total} cases" if ran == total else f"{ran} of {total} cases run"
        head = f"drift: {internals} internals, {mutations} mutations, {counted}"
        if self.skipped:
            return f"{head}, skipped: {self.skipped}"
        assert self.results is not None
        failed = [c.id for c in self.cases if self.verdicts.get(c.id)]
        base = self.observation(BASELINE)
        absent = [
            c.id
            for c in self.cases
            if "not_applicable" in self.observation(c.id) or not_applicable(c, base)
        ]
        unjudged = [c.id for c in self.cases if c.id not in self.verdicts and c.id not in absent]
        absent_note = f" ({len(absent)} not applicable: absent here)" if absent else ""
        if not failed and not unjudged:
            return f"{head}, all clean{absent_note}"
        parts = [f"{ran - len(failed) - len(absent) - len(unjudged)} clean"]
        if failed:
            shown = ", ".join(failed[:5]) + (", ..." if len(failed) > 5 else "")
            parts.append(f"{len(failed)} failed ({shown})")
        if unjudged:
            parts.append(f"{len(unjudged)} not judged")
        return f"{head}, {', '.join(parts)}{absent_note}"


_DRIFT = pytest.StashKey[Drift]()


def _selected(session: pytest.Session) -> list[Case]:
    found = []
    for item in session.items:
        spec = getattr(item, "callspec", None)
        if spec is not None and isinstance(spec.params.get("case"), Case):
            found.append(spec.params["case"])
    return list(dict.fromkeys(found))


def _directory(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    """Where the observations go: pytest's cache, else pytest's own temporary directory (which
    pytest prunes), never a bare temporary directory that every run would leave behind."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("drift"))
    return factory.mktemp("drift")


@pytest.fixture(scope="session")
def drift(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Drift:
    """The drift run of the cases this session selected (skipped, with the reason, where
    FlashInfer does not import)."""
    config = request.config
    run = Drift(cases=_selected(request.session))
    config.stash[_DRIFT] = run
    directory = run.directory = _directory(config, tmp_path_factory)
    try:
        run.results = pool.run(run.cases, directory / "cases")
    except pool.Unavailable as exc:
        run.skipped = str(exc)
    if run.skipped:
        pytest.skip(run.skipped)
    return run


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash.get(_DRIFT, None)
    if run is None:
        return
    line = run.coverage_line()
    terminalreporter.write_sep("-", "drift")
    terminalreporter.write_line(line)
    if run.results is not None:
        terminalreporter.write_line(
            f"drift: {run.results.seconds:.0f} s on {run.results.workers} zygotes "
            f"(FlashInfer {run.results.version}); observations in {run.results.directory}"
        )
        left_out = run.results.table.get("left_out") or {}
        for section, why in left_out.items():
            terminalreporter.write_line(f"drift: the pin table has no [[{section}]] here: {why}")
        through = [c for c, notes in run.collateral.items() if notes]
        if through:
            terminalreporter.write_line(
                f"drift: {len(through)} cases also disabled a feature through FlashInfer's own "
                f"use of the broken internal ({', '.join(through[:4])}"
                f"{', ...' if len(through) > 4 else ''}; see results.json)"
            )
    directory = run.directory
    if directory is None:
        return
    (directory / "coverage.txt").write_text(line + "\n", encoding="utf-8")
    if run.results is not None:
        summary = {
            "line": line,
            "seconds": run.results.seconds,
            "verdicts": run.verdicts,
            "collateral": run.collateral,
        }
        (directory / "results.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    if os.environ.get(REPORT_ENV):
        Path(os.environ[REPORT_ENV]).write_text(line + "\n", encoding="utf-8")
