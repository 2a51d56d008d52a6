"""The compat matrix's data (``compat/matrix.toml``) and the comparison of what a cell observed
with what it declares. Pure Python: no FlashInfer, torch or nox, so it is unit-testable."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from compat.outcomes import TestCase
from fi_patches.pins.reading import toml

MATRIX_FILE = Path(__file__).with_name("matrix.toml")
NEWEST = "newest"
STATES = ("enabled", "disabled")
SCHEMA = 1

# How tests/conftest.py words its skips (require_feature and flashinfer_or_skip).
SKIP_DISABLED = re.compile(r"^(?P<feature>[A-Za-z_]\w*) is disabled here: (?P<reason>.+)$", re.S)
SKIP_IMPORT = re.compile(r"^import flashinfer fails here\b")
# A feature disabled for the device rather than the release: the test did not target sm_103,
# which the matrix does not speak for.
DEVICE_REASON = re.compile(r"\bneeds \S.* but there is |; this device is ")


class MatrixError(ValueError):
    """``matrix.toml`` is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class Outcome:
    """One acceptable outcome: a state and a pattern searched in the compat layer's reason."""

    state: str
    reason: str

    def matches(self, enabled: bool, reason: str) -> bool:
        return (self.state == "enabled") == enabled and re.search(self.reason, reason) is not None

    def describe(self) -> str:
        return f"{self.state} /{self.reason}/"


@dataclass(frozen=True)
class Expectation:
    """What a feature should be in a cell: any one of ``outcomes``."""

    name: str
    outcomes: tuple[Outcome, ...]
    why: str = ""

    def match(self, enabled: bool, reason: str) -> Outcome | None:
        """The first outcome the observed state and reason match, else None."""
        return next((o for o in self.outcomes if o.matches(enabled, reason)), None)

    @property
    def states(self) -> frozenset[str]:
        return frozenset(o.state for o in self.outcomes)

    def describe(self) -> str:
        return " or ".join(o.describe() for o in self.outcomes)


@dataclass(frozen=True)
class KnownFailure:
    """A test accepted as failing in one cell: a node-id pattern and the reason it fails there."""

    test: str
    why: str

    def matches(self, case: TestCase) -> bool:
        return case.outcome in ("failed", "error") and re.search(self.test, case.nodeid) is not None


@dataclass(frozen=True)
class Cell:
    """One row of the matrix: a FlashInfer release (or ``newest``), how it is run, and what each
    feature should be there."""

    id: str
    flashinfer: str
    expect: Mapping[str, Expectation]
    expect_allow_unverified: Mapping[str, Expectation] | None = None
    simulate_import: bool = False
    imports: bool = True
    why: str = ""
    known_failures: tuple[KnownFailure, ...] = ()
    dsl: str = ""
    """The nvidia-cutlass-dsl release pinned in this cell ('' : whatever pip resolves)."""
    tests: tuple[str, ...] = ()
    """The test paths this cell runs (empty: the whole suite)."""
    suite: str = ""
    """The name of the ``[suites]`` list ``tests`` came from ('' : given inline or whole)."""

    @property
    def environment(self) -> str:
        """The id of the environment it runs in (cells of one release and DSL share one)."""
        return f"{self.flashinfer}-dsl{self.dsl}" if self.dsl else self.flashinfer

    def known(self, case: TestCase) -> KnownFailure | None:
        """The known failure that accounts for ``case`` failing here, if any."""
        return next((k for k in self.known_failures if k.matches(case)), None)

    @property
    def slug(self) -> str:
        """The id as a file name: ``0.7.0 (simulated import)`` -> ``0.7.0-simulated-import``."""
        return re.sub(r"[^A-Za-z0-9.]+", "-", self.id).strip("-")

    @property
    def is_newest(self) -> bool:
        return self.flashinfer == NEWEST


@dataclass(frozen=True)
class Matrix:
    """The parsed data file."""

    features: tuple[str, ...]
    cells: tuple[Cell, ...]
    expectations: Mapping[str, Expectation]
    run_everywhere: tuple[str, ...] = ()
    device: str = "sm_103"
    torch: str = "torch==2.13.0"
    extras: str = "test"
    source: str = "<matrix>"

    def releases(self) -> list[str]:
        """The distinct releases, one environment each, in file order with ``newest`` last."""
        seen = list(dict.fromkeys(c.flashinfer for c in self.cells))
        return [r for r in seen if r != NEWEST] + [r for r in seen if r == NEWEST]

    def listed_releases(self) -> list[str]:
        return [r for r in self.releases() if r != NEWEST]

    def environments(self) -> list[str]:
        """The distinct environments (a release, or a release with a pinned DSL), in file
        order with ``newest`` last: one nox ``cell(...)`` session each."""
        seen = list(dict.fromkeys(c.environment for c in self.cells))
        return [e for e in seen if e != NEWEST] + [e for e in seen if e == NEWEST]

    def cells_in(self, environment: str) -> list[Cell]:
        return [c for c in self.cells if c.environment == environment]

    def cells_for(self, release: str) -> list[Cell]:
        return [c for c in self.cells if c.flashinfer == release]

    def cell(self, cell_id: str) -> Cell:
        for c in self.cells:
            if c.id == cell_id:
                return c
        raise KeyError(f"no cell {cell_id!r} in {self.source}")

    def listed_as(self, version: str) -> str | None:
        """The listed release equal to ``version`` (PEP 440 equality), if any."""
        wanted = Version(version)
        return next((r for r in self.listed_releases() if Version(r) == wanted), None)


# --- Loading -----------------------------------------------------------------------------------

_TOP_KEYS = {
    "schema",
    "device",
    "torch",
    "extras",
    "features",
    "feature_expect",
    "run_everywhere",
    "suites",
    "tests",
    "expect",
    "cell",
}
_CELL_KEYS = {
    "id",
    "flashinfer",
    "expect",
    "expect_allow_unverified",
    "features",
    "simulate_import",
    "imports",
    "why",
    "known_failures",
    "dsl",
    "tests",
}


def _outcome(raw: Any, where: str) -> Outcome:
    if not isinstance(raw, Mapping) or set(raw) - {"state", "reason"} or "state" not in raw:
        raise MatrixError(f"{where}: an outcome is {{state = ..., reason = '...'}}, got {raw!r}")
    state = raw["state"]
    if state not in STATES:
        raise MatrixError(f"{where}: state {state!r} is not one of {', '.join(STATES)}")
    reason = raw.get("reason", "")
    if not isinstance(reason, str):
        raise MatrixError(f"{where}: reason must be a string pattern")
    try:
        re.compile(reason)
    except re.error as exc:
        raise MatrixError(
            f"{where}: reason {reason!r} is not a regular expression ({exc})"
        ) from exc
    return Outcome(state, reason)


def _expectation(name: str, raw: Any, where: str) -> Expectation:
    if not isinstance(raw, Mapping):
        raise MatrixError(f"{where}: an expectation is a table, got {raw!r}")
    unknown = set(raw) - {"state", "reason", "any", "why"}
    if unknown:
        raise MatrixError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    why = str(raw.get("why", ""))
    if "any" in raw:
        if "state" in raw or "reason" in raw:
            raise MatrixError(f"{where}: give either state/reason or any = [...], not both")
        items = raw["any"]
        if not isinstance(items, list) or not items:
            raise MatrixError(f"{where}: any must be a non-empty list of outcomes")
        outcomes = tuple(_outcome(o, f"{where}.any[{i}]") for i, o in enumerate(items))
    else:
        outcomes = (_outcome({k: v for k, v in raw.items() if k != "why"}, where),)
    return Expectation(name, outcomes, why)


def _reference(raw: Any, named: Mapping[str, Expectation], where: str) -> Expectation:
    """A cell's expectation: the name of one under [expect], or an inline table."""
    if isinstance(raw, str):
        if raw not in named:
            known = ", ".join(sorted(named))
            raise MatrixError(f"{where}: no expectation {raw!r} under [expect] (known: {known})")
        return named[raw]
    return _expectation("<inline>", raw, where)


def _check_release(text: Any, where: str) -> str:
    if not isinstance(text, str):
        raise MatrixError(f"{where}: flashinfer must be a release string or {NEWEST!r}")
    if text == NEWEST:
        return text
    try:
        Version(text)
    except InvalidVersion as exc:
        raise MatrixError(f"{where}: flashinfer = {text!r} is not a PEP 440 version") from exc
    return text


def _suites(raw: Any, where: str) -> dict[str, tuple[str, ...]]:
    """``[suites]``: named lists of test paths, each path relative to the repository root."""
    if not isinstance(raw, Mapping):
        raise MatrixError(f"{where}: a table of suite name = [test paths]")
    root = Path(__file__).resolve().parent.parent
    suites: dict[str, tuple[str, ...]] = {}
    for name, paths in raw.items():
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise MatrixError(f"{where}: {name} must be a non-empty list of test paths")
        for path in paths:
            if not (root / path).exists():
                raise MatrixError(f"{where}: {name} names {path!r}, which does not exist")
        suites[str(name)] = tuple(paths)
    return suites


def _tests(
    raw: Any, suites: Mapping[str, tuple[str, ...]], where: str
) -> tuple[str, tuple[str, ...]]:
    """A cell's tests: a suite's name or an inline list of paths (empty: the whole suite),
    as (suite name or '', paths)."""
    if isinstance(raw, str):
        if raw not in suites:
            known = ", ".join(sorted(suites)) or "none"
            raise MatrixError(f"{where}: no suite {raw!r} under [suites] (known: {known})")
        return raw, suites[raw]
    if not isinstance(raw, list) or not all(isinstance(t, str) and t for t in raw):
        raise MatrixError(f"{where}: give a suite name or a list of test paths, got {raw!r}")
    return "", tuple(raw)


def parse(data: Mapping[str, Any], source: str = "<matrix>") -> Matrix:
    """The matrix in ``data`` (a parsed TOML document); raises :class:`MatrixError`."""
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise MatrixError(f"{source}: unknown top-level key(s) {', '.join(sorted(unknown))}")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise MatrixError(f"{source}: schema {data.get('schema')!r} is not {SCHEMA}")
    features = data.get("features")
    if (
        not isinstance(features, list)
        or not features
        or not all(isinstance(f, str) and re.fullmatch(r"[A-Za-z_]\w*", f) for f in features)
    ):
        raise MatrixError(f"{source}: features must be a non-empty list of feature names")
    if len(set(features)) != len(features):
        raise MatrixError(f"{source}: features lists a name twice")
    run_everywhere = data.get("run_everywhere", [])
    for pattern in run_everywhere:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise MatrixError(f"{source}: run_everywhere {pattern!r}: {exc}") from exc

    suites = _suites(data.get("suites", {}), f"{source}: [suites]")
    default_tests = data.get("tests", [])
    _tests(default_tests, suites, f"{source}: tests")

    named = {
        name: _expectation(name, raw, f"{source}: [expect.{name}]")
        for name, raw in data.get("expect", {}).items()
    }
    # [feature_expect.<feature>]: "<cell's expectation>" = "<this feature's instead>".
    substitutes: dict[str, dict[str, Expectation]] = {}
    for name, table in data.get("feature_expect", {}).items():
        where = f"{source}: [feature_expect.{name}]"
        if name not in features:
            raise MatrixError(f"{where}: {name} is not in the features list")
        if not isinstance(table, Mapping):
            raise MatrixError(f"{where}: a table of expectation names")
        substitutes[name] = {}
        for instead_of, replacement in table.items():
            if instead_of not in named:
                raise MatrixError(f"{where}: no expectation {instead_of!r} under [expect]")
            substitutes[name][instead_of] = _reference(replacement, named, f"{where}.{instead_of}")

    def for_feature(name: str, default: Expectation) -> Expectation:
        return substitutes.get(name, {}).get(default.name, default)

    cells: list[Cell] = []
    for index, raw in enumerate(data.get("cell", []), start=1):
        where = f"{source}: [[cell]] #{index}"
        if not isinstance(raw, Mapping):
            raise MatrixError(f"{where}: a cell is a table")
        bad = set(raw) - _CELL_KEYS
        if bad:
            raise MatrixError(f"{where}: unknown key(s) {', '.join(sorted(bad))}")
        for key in ("id", "flashinfer", "expect"):
            if key not in raw:
                raise MatrixError(f"{where}: {key} is required")
        cell_id = str(raw["id"])
        where = f"{source}: cell {cell_id!r}"
        release = _check_release(raw["flashinfer"], where)
        overrides = raw.get("features", {})
        stray = set(overrides) - set(features)
        if stray:
            raise MatrixError(
                f"{where}: features names {', '.join(sorted(stray))}, not in the features list"
            )
        default = _reference(raw["expect"], named, f"{where}: expect")
        expect = {
            name: _reference(overrides[name], named, f"{where}: features.{name}")
            if name in overrides
            else for_feature(name, default)
            for name in features
        }
        allow = None
        if "expect_allow_unverified" in raw:
            allow_default = _reference(
                raw["expect_allow_unverified"], named, f"{where}: expect_allow_unverified"
            )
            allow = {name: for_feature(name, allow_default) for name in features}
        known = []
        for i, item in enumerate(raw.get("known_failures", [])):
            spot = f"{where}: known_failures[{i}]"
            if not isinstance(item, Mapping) or set(item) != {"test", "why"}:
                raise MatrixError(f"{spot}: give {{test = '<node-id pattern>', why = '...'}}")
            try:
                re.compile(item["test"])
            except (re.error, TypeError) as exc:
                raise MatrixError(f"{spot}: test {item['test']!r}: {exc}") from exc
            if not str(item["why"]).strip():
                raise MatrixError(f"{spot}: say why it fails here")
            known.append(KnownFailure(str(item["test"]), str(item["why"]).strip()))
        dsl = str(raw.get("dsl", ""))
        if dsl:
            _check_release(dsl, f"{where}: dsl")
        suite, tests = _tests(raw.get("tests", default_tests), suites, f"{where}: tests")
        cells.append(
            Cell(
                id=cell_id,
                flashinfer=release,
                expect=expect,
                expect_allow_unverified=allow,
                simulate_import=bool(raw.get("simulate_import", False)),
                imports=bool(raw.get("imports", True)),
                why=str(raw.get("why", "")).strip(),
                known_failures=tuple(known),
                dsl=dsl,
                tests=tests,
                suite=suite,
            )
        )
    if not cells:
        raise MatrixError(f"{source}: no [[cell]] entries")
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):
        raise MatrixError(f"{source}: two cells share an id")
    slugs = [c.slug for c in cells]
    if len(set(slugs)) != len(slugs):
        raise MatrixError(f"{source}: two cell ids map to the same file name")
    return Matrix(
        features=tuple(features),
        cells=tuple(cells),
        expectations=named,
        run_everywhere=tuple(run_everywhere),
        device=str(data.get("device", "sm_103")),
        torch=str(data.get("torch", "torch==2.13.0")),
        extras=str(data.get("extras", "test")),
        source=source,
    )


def load(path: Path | str = MATRIX_FILE) -> Matrix:
    """Read and validate the data file."""
    path = Path(path)
    with path.open("rb") as handle:
        try:
            data = toml.load(handle)
        except toml.TOMLDecodeError as exc:
            raise MatrixError(f"{path}: {exc}") from exc
    return parse(data, source=str(path))


# --- Checking ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """One feature in one doctor run: what was observed, what was expected, and whether they
    agree (``problem`` is None when they do)."""

    feature: str
    observed: bool | None  # None: doctor did not report the feature
    reason: str
    probes_ok: int
    probes_total: int
    expected: Expectation | None
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def state(self) -> str:
        if self.observed is None:
            return "missing"
        return "enabled" if self.observed else "disabled"


def check_doctor(
    expect: Mapping[str, Expectation], records: Sequence[Mapping[str, Any]], run: str = "doctor"
) -> tuple[list[Verdict], list[str]]:
    """Each expected feature's verdict for doctor's JSON ``records``, and the problems (including
    features doctor reports that the matrix does not list)."""
    by_name = {r.get("name"): r for r in records}
    verdicts: list[Verdict] = []
    problems: list[str] = []
    for name, expectation in expect.items():
        record = by_name.get(name)
        if record is None:
            problem = f"{run}: feature {name} is in matrix.toml but doctor does not report it"
            verdicts.append(Verdict(name, None, "", 0, 0, expectation, problem))
            problems.append(problem)
            continue
        enabled = bool(record.get("enabled"))
        reason = str(record.get("reason", ""))
        probes = record.get("probes") or []
        ok_count = sum(1 for p in probes if p.get("ok"))
        problem = None
        if expectation.match(enabled, reason) is None:
            state = "enabled" if enabled else "disabled"
            problem = (
                f"{run}: {name} is {state} ({reason}) but matrix.toml expects "
                f"{expectation.describe()}"
            )
            problems.append(problem)
        verdicts.append(Verdict(name, enabled, reason, ok_count, len(probes), expectation, problem))
    for name in by_name:
        if name not in expect:
            problems.append(
                f"{run}: doctor reports feature {name}, which matrix.toml does not list: "
                "add it to `features` in compat/matrix.toml"
            )
    return verdicts, problems


def check_tests(
    cell: Cell, cases: Sequence[TestCase], run_everywhere: Sequence[str] = ()
) -> list[str]:
    """Problems with the suite's outcomes in ``cell``: failures and errors (except the cell's
    ``known_failures``, which must still fail), skips that disagree with the matrix, and
    clean-disabling tests that did not run."""
    problems: list[str] = []
    failing = [c for c in cases if c.outcome in ("failed", "error")]
    bad = [c for c in failing if cell.known(c) is None]
    for known in cell.known_failures:
        if not any(known.matches(c) for c in failing):
            problems.append(
                f"tests: known failure {known.test!r} did not fail here: remove it from "
                "known_failures in compat/matrix.toml"
            )
    if bad:
        files = sorted({c.file for c in bad})
        problems.append(
            f"tests: {sum(c.outcome == 'failed' for c in bad)} failed, "
            f"{sum(c.outcome == 'error' for c in bad)} errors in {', '.join(files)}"
        )
    for case in cases:
        if case.outcome != "skipped":
            continue
        disabled = SKIP_DISABLED.match(case.message)
        if disabled:
            name, reason = disabled.group("feature"), disabled.group("reason")
            expectation = cell.expect.get(name)
            if expectation is None:
                continue  # a feature the matrix does not list: check_doctor reports it
            if DEVICE_REASON.search(reason):
                continue
            if "disabled" not in expectation.states:
                problems.append(
                    f"tests: {case.nodeid} skipped because {name} is disabled ({reason}) but "
                    "matrix.toml expects it enabled here"
                )
            elif expectation.match(False, reason) is None:
                problems.append(
                    f"tests: {case.nodeid} skipped with a reason matrix.toml does not expect for "
                    f"{name}: {reason} (expected {expectation.describe()})"
                )
        elif SKIP_IMPORT.match(case.message) and cell.imports:
            problems.append(
                f"tests: {case.nodeid} skipped because import flashinfer fails, but matrix.toml "
                "expects it to import in this cell"
            )
    for pattern in run_everywhere:
        matched = [c for c in cases if re.search(pattern, c.nodeid)]
        if not matched:
            problems.append(f"tests: no test matches run_everywhere pattern {pattern!r}")
        for case in matched:
            if case.outcome != "passed":
                problems.append(
                    f"tests: {case.nodeid} must pass in every cell but {case.outcome}"
                    + (f" ({case.message})" if case.message else "")
                )
    return problems


@dataclass
class CellCheck:
    """A cell's verdicts (default doctor run and, where declared, the allow-unverified run) and
    every problem found."""

    verdicts: list[Verdict] = field(default_factory=list)
    allow_verdicts: list[Verdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_cell(matrix: Matrix, cell: Cell, result: Mapping[str, Any]) -> CellCheck:
    """Compare one cell's result (as ``compat/cell.py`` writes it) with the matrix."""
    from compat.outcomes import cases_from_dicts

    check = CellCheck()
    if result.get("alias_of"):
        return check
    if result.get("error"):
        check.problems.append(f"setup: {result['error']}")
        return check
    doctor = result.get("doctor") or {}
    default = doctor.get("default")
    if default is None:
        check.problems.append("doctor: no default run recorded")
    elif default.get("error"):
        check.problems.append(f"doctor: {default['error']}")
    else:
        check.verdicts, problems = check_doctor(cell.expect, default.get("records", []))
        check.problems += problems
    if cell.expect_allow_unverified is not None:
        allowed = doctor.get("allow_unverified")
        if allowed is None:
            check.problems.append("doctor: no FI_PATCHES_ALLOW_UNVERIFIED=1 run recorded")
        elif allowed.get("error"):
            check.problems.append(f"doctor (allow unverified): {allowed['error']}")
        else:
            check.allow_verdicts, problems = check_doctor(
                cell.expect_allow_unverified,
                allowed.get("records", []),
                run="doctor (FI_PATCHES_ALLOW_UNVERIFIED=1)",
            )
            check.problems += problems
    tests = result.get("tests") or {}
    if tests.get("error"):
        check.problems.append(f"tests: {tests['error']}")
    else:
        cases = cases_from_dicts(tests.get("cases", []))
        if not cases:
            check.problems.append("tests: no test outcomes recorded")
        check.problems += check_tests(cell, cases, matrix.run_everywhere)
    return check
