"""Per-test outcomes of one pytest run, read from its JUnit XML (``-o junit_family=xunit1``, which
records each test's file), so the matrix can say which files fail where and why tests skipped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed")

# pytest words a skip's message "Skipped: <reason>" in some versions and paths.
_SKIP_PREFIX = "Skipped: "


@dataclass(frozen=True)
class TestCase:
    """One test (or collection error): its node id, file, outcome and the first message line."""

    nodeid: str
    file: str
    outcome: str
    message: str = ""

    __test__ = False  # not a pytest test class, despite the name

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _module_path(classname: str) -> str:
    return classname.replace(".", "/") + ".py"


def _nodeid(element: ET.Element) -> tuple[str, str]:
    """The node id and file of a ``<testcase>``: xunit1 gives ``file``; else guess it from
    ``classname`` (``tests.test_x.TestC`` -> ``tests/test_x.py::TestC``)."""
    classname = element.get("classname", "")
    name = element.get("name", "")
    file = element.get("file")
    if not file:
        if not classname:  # a collection error names the module in ``name``
            return _module_path(name), _module_path(name)
        file = _module_path(classname)
        return f"{file}::{name}", file
    module = file[:-3].replace("/", ".").replace("\\", ".") if file.endswith(".py") else file
    rest = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
    parts = [file, *([p for p in rest.split(".") if p]), name] if name else [file]
    return "::".join(parts), file


def _first_line(text: str | None) -> str:
    text = (text or "").strip()
    if text.startswith(_SKIP_PREFIX):
        text = text[len(_SKIP_PREFIX) :]
    return text


def parse_junit(source: str | Path) -> list[TestCase]:
    """Every ``<testcase>`` in the JUnit XML file (or XML text) ``source``."""
    text = str(source)
    root = ET.fromstring(text) if text.lstrip().startswith("<") else ET.parse(text).getroot()
    cases = []
    for element in root.iter("testcase"):
        nodeid, file = _nodeid(element)
        outcome, message = "passed", ""
        for child in element:
            tag = child.tag
            if tag == "error":
                outcome, message = "error", _first_line(child.get("message"))
                break
            if tag == "failure" and outcome != "error":
                outcome, message = "failed", _first_line(child.get("message"))
            elif tag == "skipped" and outcome == "passed":
                kind = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                outcome, message = kind, _first_line(child.get("message"))
        cases.append(TestCase(nodeid, file, outcome, message))
    return cases


def counts(cases: Iterable[TestCase]) -> dict[str, int]:
    """Outcome -> number of tests, with every outcome present (zero where none)."""
    found = Counter(c.outcome for c in cases)
    return {outcome: found.get(outcome, 0) for outcome in OUTCOMES}


def describe_counts(numbers: Mapping[str, int]) -> str:
    """``12 passed, 1 failed, 3 skipped`` (zeros left out, except ``0 passed`` when all are)."""
    parts = [f"{numbers[o]} {o}" for o in OUTCOMES if numbers.get(o)]
    return ", ".join(parts) if parts else "no tests"


def failing_files(cases: Iterable[TestCase]) -> dict[str, list[TestCase]]:
    """File -> its failed and erroring tests."""
    found: dict[str, list[TestCase]] = {}
    for case in cases:
        if case.outcome in ("failed", "error"):
            found.setdefault(case.file, []).append(case)
    return found


def cases_from_dicts(items: Sequence[Mapping[str, Any]]) -> list[TestCase]:
    """The inverse of :meth:`TestCase.to_dict`, for results read back from JSON."""
    return [
        TestCase(str(i["nodeid"]), str(i["file"]), str(i["outcome"]), str(i.get("message", "")))
        for i in items
    ]
