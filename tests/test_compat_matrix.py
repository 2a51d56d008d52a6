"""The compat matrix's own logic (compat/): reading matrix.toml, matching expectations, checking
test outcomes and rendering RESULTS.md from sample results. Pure Python: no FlashInfer."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from compat import cell as runner
from compat import matrix as cm
from compat.outcomes import TestCase, counts, describe_counts, failing_files, parse_junit
from compat.report import render

# Nothing here depends on the installed FlashInfer release: the compat matrix runs it once, in
# the main run, not in every cell (see pyproject.toml).
pytestmark = pytest.mark.release_independent

ROOT = Path(__file__).resolve().parent.parent

ENABLED = "FlashInfer 0.7.4 is verified; 7 probes and the self-check pass."
ENABLED_DSL = "FlashInfer 0.7.4 and CuTe DSL 4.8.1 are verified; 16 probes and the self-check pass."
IMPORT_FAILED = (
    "import flashinfer failed (AssertionError: Torch not compiled with CUDA enabled), "
    "so every patch is off."
)
NO_MODULE = (
    "FlashInfer 0.6.18.post1 lacks an internal it needs: "
    "flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm is not importable "
    "(ModuleNotFoundError: No module named 'flashinfer.gemm.kernels.cute_dsl."
    "low_latency_blockscaled_gemm') (and 6 more)."
)
UNVERIFIED = (
    "FlashInfer 0.7.5 is newer than the verified range <=0.7.4,>=0.7.0 "
    "(all 7 probes pass; set FI_PATCHES_ALLOW_UNVERIFIED=1 to enable it)."
)
ALLOWED = (
    "FlashInfer 0.7.5 is unverified (verified: <=0.7.4,>=0.7.0); enabled by "
    "FI_PATCHES_ALLOW_UNVERIFIED=1 because all 7 probes and the self-check pass."
)
NO_DEVICE = (
    "needs sm_100, sm_103 or sm_107 but there is no CUDA device "
    "(FI_PATCHES_DEVICE=sm_103 validates offline)."
)

SAMPLE = {
    "features": ["pinned_tactics", "wide_tile"],
    "run_everywhere": [r"::test_clean_disable$"],
    "expect": {
        "enabled": {"state": "enabled", "reason": r"is verified; \d+ probes"},
        "import_fails": {"state": "disabled", "reason": r"^import flashinfer failed \(.*CUDA"},
        "no_module": {"state": "disabled", "reason": r"low_latency_blockscaled_gemm is not"},
        "unverified": {
            "any": [
                {"state": "disabled", "reason": "is newer than the verified range"},
                {"state": "disabled", "reason": "lacks an internal it needs"},
            ]
        },
        "allowed": {
            "any": [
                {"state": "enabled", "reason": "enabled by FI_PATCHES_ALLOW_UNVERIFIED=1"},
                {"state": "disabled", "reason": "lacks an internal it needs"},
            ]
        },
    },
    "cell": [
        {"id": "0.6.18.post1", "flashinfer": "0.6.18.post1", "imports": False,
         "expect": "import_fails"},
        {"id": "0.6.18.post1 (simulated import)", "flashinfer": "0.6.18.post1",
         "simulate_import": True, "expect": "no_module",
         "features": {"wide_tile": {"state": "disabled", "reason": "outside"}}},
        {"id": "0.7.4", "flashinfer": "0.7.4", "expect": "enabled"},
        {"id": "newest", "flashinfer": "newest", "expect": "unverified",
         "expect_allow_unverified": "allowed"},
    ],
}  # fmt: skip


def sample() -> cm.Matrix:
    return cm.parse(copy.deepcopy(SAMPLE), source="sample.toml")


def record(name: str, enabled: bool, reason: str, probes: int = 7) -> dict[str, Any]:
    return {
        "name": name,
        "enabled": enabled,
        "reason": reason,
        "probes": [
            {"probe": f"p{i}", "ok": enabled or i > 0, "reason": None} for i in range(probes)
        ],
    }


def case(nodeid: str, outcome: str = "passed", message: str = "") -> dict[str, str]:
    return TestCase(nodeid, nodeid.split("::")[0], outcome, message).to_dict()


def result(cell_id: str, records: list[dict[str, Any]], cases: list[dict[str, str]], **extra: Any):
    data = {
        "cell": cell_id,
        "flashinfer": extra.pop("flashinfer", cell_id.split()[0]),
        "alias_of": None,
        "doctor": {"default": {"records": records, "seconds": 2.0}},
        "tests": {"cases": cases, "seconds": 10.0, "exit_code": 0},
        "timing": {"setup_s": 30.0, "tests_s": 10.0, "doctor_s": 2.0, "cell_s": 12.0},
    }
    data.update(extra)
    return data


CLEAN = case("tests/test_a.py::test_clean_disable")


def tc(name: str, outcome: str = "passed", message: str = "") -> TestCase:
    """A test in tests/t.py."""
    return TestCase(f"tests/t.py::{name}", "tests/t.py", outcome, message)


def disabled(feature: str, reason: str) -> str:
    """How tests/conftest.py's require_feature words its skip."""
    return f"{feature} is disabled here: {reason}"


# --- The real data file ------------------------------------------------------------------------


def test_the_data_file_loads_and_lists_the_required_releases():
    matrix = cm.load()
    releases = matrix.releases()
    for release in ("0.6.18.post1", "0.7.0", "0.7.1", "0.7.2.post1", "0.7.4"):
        assert release in releases
    assert releases[-1] == cm.NEWEST
    assert "pinned_tactics" in matrix.features
    simulated = [c for c in matrix.cells if c.simulate_import]
    assert any(c.flashinfer == "0.7.0" for c in simulated)
    assert matrix.torch == "torch==2.13.0"


def test_the_data_files_patterns_match_todays_reasons():
    matrix = cm.load()
    expect = {c.id: c.expect["pinned_tactics"] for c in matrix.cells}
    assert expect["0.7.0"].match(False, IMPORT_FAILED)
    assert expect["0.6.18.post1"].match(False, IMPORT_FAILED)
    assert expect["0.6.18.post1 (simulated import)"].match(False, NO_MODULE)
    assert expect["0.7.4"].match(True, ENABLED_DSL)  # a feature that runs CuTe DSL kernels
    assert not expect["0.7.4"].match(False, ENABLED_DSL)
    assert matrix.cell("0.7.4").expect["pinned_ops"].match(True, ENABLED)
    # a DSL release no cell ran is not what a cell expects: the matrix must run it first
    assert not expect["0.7.4"].match(
        True,
        "CuTe DSL 4.9.0 is not in the compat matrix; after "
        "verified 4.8.1; 16 probes and the self-check pass.",
    )
    assert expect["newest"].match(False, UNVERIFIED)
    allowed = matrix.cell("newest").expect_allow_unverified
    assert allowed is not None and allowed["pinned_tactics"].match(True, ALLOWED)
    # an unrelated import failure is not the CPU-torch one
    assert not expect["0.7.0"].match(False, "import flashinfer failed (ImportError: no tvm_ffi).")


# --- Parsing -----------------------------------------------------------------------------------


def test_defaults_apply_to_every_feature_and_overrides_to_one():
    matrix = sample()
    simulated = matrix.cell("0.6.18.post1 (simulated import)")
    assert simulated.expect["pinned_tactics"].name == "no_module"
    assert simulated.expect["wide_tile"].name == "<inline>"
    assert matrix.cell("0.7.4").expect["wide_tile"].name == "enabled"
    assert simulated.slug == "0.6.18.post1-simulated-import"
    assert matrix.releases() == ["0.6.18.post1", "0.7.4", "newest"]
    assert [c.id for c in matrix.cells_for("0.6.18.post1")] == [
        "0.6.18.post1",
        "0.6.18.post1 (simulated import)",
    ]
    assert matrix.listed_as("0.7.4") == "0.7.4"
    assert matrix.listed_as("0.7.4.post1") is None


def test_cells_run_the_default_suite_unless_they_name_their_own():
    data = copy.deepcopy(SAMPLE)
    data["suites"] = {"core": ["tests/test_compat.py"], "wide": ["tests/test_wide_feature.py"]}
    data["tests"] = "core"
    data["cell"][1]["tests"] = "wide"
    data["cell"][2]["tests"] = ["tests/test_boundary.py"]
    cells = cm.parse(data).cells
    assert [(c.suite, c.tests) for c in cells[:3]] == [
        ("core", ("tests/test_compat.py",)),
        ("wide", ("tests/test_wide_feature.py",)),
        ("", ("tests/test_boundary.py",)),
    ]
    assert {c.suite for c in cm.load().cells} >= {"release", "dsl", "verdict"}


def test_adding_a_feature_is_one_line():
    data = copy.deepcopy(SAMPLE)
    data["features"].append("pinned_cute_dsl")
    matrix = cm.parse(data)
    assert all("pinned_cute_dsl" in c.expect for c in matrix.cells)
    assert matrix.cell("0.7.4").expect["pinned_cute_dsl"].name == "enabled"


def test_a_feature_that_differs_on_cpu_says_so_once():
    data = copy.deepcopy(SAMPLE)
    data["expect"]["needs_device"] = {"state": "disabled", "reason": "self-check failed"}
    data["feature_expect"] = {"wide_tile": {"enabled": "needs_device"}}
    matrix = cm.parse(data)
    assert matrix.cell("0.7.4").expect["wide_tile"].name == "needs_device"
    assert matrix.cell("0.7.4").expect["pinned_tactics"].name == "enabled"
    # a cell's own override still wins, and other expectations are untouched
    simulated = matrix.cell("0.6.18.post1 (simulated import)")
    assert simulated.expect["wide_tile"].name == "<inline>"
    assert matrix.cell("0.6.18.post1").expect["wide_tile"].name == "import_fails"
    data["feature_expect"] = {"ghost": {"enabled": "needs_device"}}
    with pytest.raises(cm.MatrixError, match="ghost is not in the features list"):
        cm.parse(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(feature=["x"]), "unknown top-level key"),
        (lambda d: d["cell"][0].update(expect="nope"), "no expectation 'nope'"),
        (lambda d: d["cell"][0].update(features={"ghost": "enabled"}), "not in the features"),
        (lambda d: d["cell"][0].update(flashinfer="0.7.x"), "not a PEP 440 version"),
        (lambda d: d["cell"][0].update(expectt="enabled"), "unknown key"),
        (lambda d: d["expect"]["enabled"].update(state="on"), "is not one of"),
        (lambda d: d["expect"]["enabled"].update(reason="(unclosed"), "not a regular expression"),
        (lambda d: d["cell"].append(dict(d["cell"][0])), "share an id"),
        (lambda d: d.update(features=["pinned_tactics", "pinned_tactics"]), "twice"),
        (lambda d: d.update(features=[]), "non-empty list"),
        (lambda d: d["cell"][0].update(tests="nightly"), "cell '0.6.18.post1': tests: no suite"),
        (lambda d: d.update(suites={"one": ["tests/no_such.py"]}), r"\[suites\]: one names"),
        (lambda d: d.update(suites={"one": []}), r"\[suites\]: one must be a non-empty"),
        (lambda d: d.update(tests=7), "bad.toml: tests: give a suite name"),
    ],
)
def test_malformed_data_is_refused_with_the_place(change, message):
    data = copy.deepcopy(SAMPLE)
    change(data)
    with pytest.raises(cm.MatrixError, match=message):
        cm.parse(data, source="bad.toml")


# --- Doctor checks -----------------------------------------------------------------------------


def test_doctor_records_match_by_state_and_reason_pattern():
    expect = sample().cell("0.7.4").expect
    verdicts, problems = cm.check_doctor(
        expect, [record("pinned_tactics", True, ENABLED), record("wide_tile", True, ENABLED)]
    )
    assert problems == [] and all(v.ok for v in verdicts)
    assert verdicts[0].probes_ok == 7 and verdicts[0].probes_total == 7

    verdicts, problems = cm.check_doctor(
        expect, [record("pinned_tactics", False, NO_DEVICE), record("wide_tile", True, ENABLED)]
    )
    assert len(problems) == 1 and "pinned_tactics is disabled" in problems[0]
    assert "expects enabled" in problems[0]
    assert verdicts[0].state == "disabled" and not verdicts[0].ok


def test_doctor_features_missing_or_undeclared_are_problems():
    expect = sample().cell("0.7.4").expect
    _, problems = cm.check_doctor(
        expect, [record("pinned_tactics", True, ENABLED), record("surprise", True, ENABLED)]
    )
    assert any("wide_tile is in matrix.toml but doctor does not report it" in p for p in problems)
    assert any("doctor reports feature surprise" in p and "add it" in p for p in problems)


def test_any_of_several_outcomes_is_accepted():
    allowed = sample().cell("newest").expect_allow_unverified
    assert allowed is not None
    expectation = allowed["pinned_tactics"]
    assert expectation.match(True, ALLOWED)
    assert expectation.match(False, "FlashInfer 0.8.0 lacks an internal it needs: x.")
    assert not expectation.match(False, UNVERIFIED)
    assert expectation.states == {"enabled", "disabled"}


# --- Test-outcome checks -----------------------------------------------------------------------


def test_skips_with_the_expected_reason_pass_the_check():
    matrix = sample()
    cell = matrix.cell("newest")
    outcomes = [
        tc("test_a", "skipped", disabled("pinned_tactics", UNVERIFIED)),
        tc("test_b", "skipped", disabled("wide_tile", NO_DEVICE)),
        tc("test_clean_disable"),
    ]
    assert cm.check_tests(cell, outcomes, matrix.run_everywhere) == []


def test_a_skip_for_a_feature_expected_enabled_is_a_problem():
    matrix = sample()
    outcomes = [
        tc("test_a", "skipped", disabled("pinned_tactics", UNVERIFIED)),
        tc("test_clean_disable"),
    ]
    problems = cm.check_tests(matrix.cell("0.7.4"), outcomes, matrix.run_everywhere)
    assert len(problems) == 1 and "expects it enabled here" in problems[0]


def test_a_skip_with_an_unexpected_disabled_reason_is_a_problem():
    matrix = sample()
    outcomes = [
        tc("test_a", "skipped", disabled("pinned_tactics", UNVERIFIED)),
        tc("test_clean_disable"),
    ]
    problems = cm.check_tests(matrix.cell("0.6.18.post1"), outcomes, matrix.run_everywhere)
    assert len(problems) == 1 and "does not expect" in problems[0]


def test_import_skips_are_problems_only_where_flashinfer_should_import():
    matrix = sample()
    outcomes = [
        TestCase("tests/t.py::test_a", "tests/t.py", "skipped", "import flashinfer fails here (X)"),
        TestCase("tests/t.py::test_clean_disable", "tests/t.py", "passed"),
    ]
    assert cm.check_tests(matrix.cell("0.6.18.post1"), outcomes, matrix.run_everywhere) == []
    problems = cm.check_tests(matrix.cell("0.7.4"), outcomes, matrix.run_everywhere)
    assert len(problems) == 1 and "expects it to import" in problems[0]


def test_failures_and_clean_disabling_tests_that_did_not_run_are_problems():
    matrix = sample()
    outcomes = [
        TestCase("tests/t.py::test_a", "tests/t.py", "failed", "assert 0"),
        TestCase("tests/u.py::test_b", "tests/u.py", "error", "fixture boom"),
        TestCase("tests/t.py::test_clean_disable", "tests/t.py", "skipped", "no reason"),
    ]
    problems = cm.check_tests(matrix.cell("0.7.4"), outcomes, matrix.run_everywhere)
    assert problems[0] == "tests: 1 failed, 1 errors in tests/t.py, tests/u.py"
    assert any("must pass in every cell but skipped" in p for p in problems)
    problems = cm.check_tests(matrix.cell("0.7.4"), outcomes[:1], matrix.run_everywhere)
    assert any("no test matches run_everywhere" in p for p in problems)


def test_known_failures_are_accepted_only_while_they_still_fail():
    data = copy.deepcopy(SAMPLE)
    data["cell"][2]["known_failures"] = [{"test": r"::test_a$", "why": "0.7.4 renamed x"}]
    matrix = cm.parse(data)
    cell = matrix.cell("0.7.4")
    failing = [tc("test_a", "failed", "assert 0"), tc("test_clean_disable")]
    assert cm.check_tests(cell, failing, matrix.run_everywhere) == []
    assert cell.known(failing[0]) is not None and cell.known(failing[1]) is None
    passing = [tc("test_a"), tc("test_clean_disable")]
    problems = cm.check_tests(cell, passing, matrix.run_everywhere)
    assert len(problems) == 1 and "did not fail here" in problems[0]
    data["cell"][2]["known_failures"] = [{"test": "x"}]
    with pytest.raises(cm.MatrixError, match="known_failures"):
        cm.parse(data)


# --- JUnit parsing -----------------------------------------------------------------------------

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_s" file="tests/test_a.py" line="4">
  <skipped type="pytest.skip" message="pinned_tactics is disabled here: why.">x</skipped></testcase>
<testcase classname="tests.test_a" name="test_x" file="tests/test_a.py" line="5">
  <skipped type="pytest.xfail" message="nope" /></testcase>
<testcase classname="tests.test_a.TestC" name="test_m" file="tests/test_a.py" line="8">
  <failure message="assert 0">tb</failure></testcase>
<testcase classname="tests.test_a" name="test_td" file="tests/test_a.py" line="13">
  <error message="failed on teardown with &quot;RuntimeError: boom&quot;">tb</error></testcase>
<testcase classname="tests.test_b" name="test_p[a|b]" file="tests/test_b.py" line="14" />
<testcase classname="" name="tests.test_broken"><error message="collection failure">tb</error>
</testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_node_ids_and_counts():
    cases = parse_junit(JUNIT)
    by_id = {c.nodeid: c for c in cases}
    assert by_id["tests/test_a.py::test_s"].outcome == "skipped"
    assert by_id["tests/test_a.py::test_s"].message == "pinned_tactics is disabled here: why."
    assert by_id["tests/test_a.py::test_x"].outcome == "xfailed"
    assert by_id["tests/test_a.py::TestC::test_m"].outcome == "failed"
    assert by_id["tests/test_b.py::test_p[a|b]"].outcome == "passed"
    assert by_id["tests/test_broken.py"].outcome == "error"
    numbers = counts(cases)
    assert numbers == {"passed": 1, "failed": 1, "error": 2, "skipped": 1, "xfailed": 1}
    assert describe_counts(numbers) == "1 passed, 1 failed, 2 error, 1 skipped, 1 xfailed"
    assert sorted(failing_files(cases)) == ["tests/test_a.py", "tests/test_broken.py"]


# --- Rendering ---------------------------------------------------------------------------------


def sample_results() -> dict[str, Any]:
    failed = [record(f, False, IMPORT_FAILED) for f in ("pinned_tactics", "wide_tile")]
    old = [record("pinned_tactics", False, NO_MODULE), record("wide_tile", False, "x | is outside")]
    enabled = [record(f, True, ENABLED) for f in ("pinned_tactics", "wide_tile")]
    skip = case("tests/t.py::test_s", "skipped", disabled("pinned_tactics", IMPORT_FAILED))
    fail = case("tests/t.py::test_f", "failed", "AssertionError: boom | pipe")
    timing = {"setup_s": 0, "tests_s": 0, "doctor_s": 0, "cell_s": 0}
    return {
        "0.6.18.post1": result("0.6.18.post1", failed, [CLEAN, skip]),
        "0.6.18.post1 (simulated import)": result(
            "0.6.18.post1 (simulated import)", old, [CLEAN, fail]
        ),
        "0.7.4": result("0.7.4", enabled, [CLEAN]),
        "newest": {"cell": "newest", "flashinfer": "0.7.4", "alias_of": "0.7.4", "timing": timing},
    }


def test_report_renders_states_reasons_counts_and_times():
    text, problems = render(
        sample(),
        sample_results(),
        base={"torch": "2.13.0+cpu", "seconds": 50.0},
        run={"started": 1000.0},
        machine={"python": "3.11.7", "platform": "Linux", "cpus": 2},
        now=1000.0 + 600,
    )
    assert problems == ["0.6.18.post1 (simulated import): tests: 1 failed, 0 errors in tests/t.py"]
    assert "| cell | flashinfer | pinned_tactics | wide_tile | tests |" in text
    assert f"✓ **disabled** (6/7 probes): {IMPORT_FAILED}" in text
    assert "✓ **enabled** (7/7 probes) | ✓ **enabled** (7/7 probes) | 1 passed |" in text
    assert "same as row `0.7.4` (newest is a listed release)" in text
    assert "already listed (row `0.7.4`)" in text
    assert "- `tests/t.py::test_f` (failed): AssertionError: boom | pipe" in text
    assert "x \\| is outside" in text  # table-safe
    assert "`tests/t.py` (1)" in text
    assert "| base environment (torch + shared dependencies) | 50 s" in text
    assert "**10.0 min**" in text
    assert "1 problem(s)" in text


def test_report_marks_mismatches_and_missing_cells():
    results = sample_results()
    del results["0.7.4"]
    results["newest"] = result(
        "newest",
        [record("pinned_tactics", True, ENABLED), record("wide_tile", False, UNVERIFIED)],
        [CLEAN],
        flashinfer="0.7.5",
        doctor={
            "default": {"records": [record("pinned_tactics", True, ENABLED),
                                    record("wide_tile", False, UNVERIFIED)]},
            "allow_unverified": {"records": [record("pinned_tactics", True, ALLOWED),
                                             record("wide_tile", True, ALLOWED)]},
        },
    )  # fmt: skip
    text, problems = render(sample(), results)
    assert "0.7.4: not run" in problems
    assert any(p.startswith("newest: doctor: pinned_tactics is enabled") for p in problems)
    assert "✗ **enabled** (7/7 probes) — expected disabled" in text
    assert "| `newest` + `FI_PATCHES_ALLOW_UNVERIFIED=1` | 0.7.5 |" in text
    assert "not listed: run as the `newest` row" in text


def test_setup_failures_are_reported():
    results = sample_results()
    results["0.7.4"] = runner.error_result(sample().cell("0.7.4"), "pip exited 1: no such version")
    text, problems = render(sample(), results)
    assert "0.7.4: setup: pip exited 1: no such version" in problems
    assert "✗ setup failed: pip exited 1" in text


# --- Runner helpers ----------------------------------------------------------------------------


def pip_report(*installs: tuple[str, str, str]) -> dict[str, Any]:
    items = [
        {"metadata": {"name": n, "version": v}, "download_info": {"url": u}} for n, v, u in installs
    ]
    return {"install": items}


def test_only_a_cpu_torch_is_accepted_for_the_base():
    cpu = pip_report(("torch", "2.13.0+cpu", "file:///opt/wheels/torch.whl"), ("numpy", "2.4", ""))
    cuda = pip_report(("torch", "2.13.0", "https://files.pythonhosted.org/torch.whl"))
    assert runner.cpu_torch_problem(cpu) is None
    problem = runner.cpu_torch_problem(cuda)
    assert problem is not None and "not a CPU build" in problem
    assert runner.cpu_torch_problem(pip_report()) == "the resolution installs no torch"


def test_base_requirements_pin_everything_but_flashinfer_and_the_project():
    report = pip_report(
        ("torch", "2.13.0+cpu", ""),
        ("flashinfer-python", "0.7.4", ""),
        ("fi_patches", "0.1.0", ""),
        ("nvidia-cutlass-dsl", "4.8.1", ""),
    )
    pins = runner.base_requirements(report, exclude=["flashinfer-python", "fi-patches"])
    assert pins == ["torch==2.13.0+cpu", "nvidia-cutlass-dsl==4.8.1"]


def test_cell_environment_drops_outer_controls(monkeypatch):
    monkeypatch.setenv("FI_PATCHES_ALLOW_UNVERIFIED", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    plain = runner.cell_env(sample().cell("0.7.4"), {"FI_PATCHES_DEVICE": "sm_103"})
    assert "FI_PATCHES_ALLOW_UNVERIFIED" not in plain and "PYTHONPATH" not in plain
    assert plain["FI_PATCHES_DEVICE"] == "sm_103"


# --- The simulated-import fixture (tests/simulated_import) -------------------------------------

FAKE_PACKAGE = """
import torch
NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
MAJOR, _ = torch.cuda.get_device_capability(0)
"""

CHECK = """
import torch, json
original = torch.cuda.get_device_properties
try:
    import flashinfer
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__}))
else:
    after = torch.cuda.get_device_properties is original
    try:
        torch.cuda.get_device_properties(0)
        raised = False
    except Exception:
        raised = True
    print(json.dumps({"sms": flashinfer.NUM_SMS, "major": flashinfer.MAJOR,
                      "restored": after, "runtime_query_raises": raised}))
"""


def _run_fake_import(tmp_path: Path, route: str) -> dict[str, Any]:
    """Import a fake ``flashinfer`` that reads the device at import, with the simulation off,
    on through sitecustomize (``PYTHONPATH`` + env var) or on through the matrix's ``.pth`` line."""
    import json

    package = tmp_path / "flashinfer"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_PACKAGE))
    env = {k: v for k, v in os.environ.items() if k not in runner.CONTROLLED_ENV}
    env["PYTHONPATH"] = str(tmp_path)
    code = CHECK
    if route == "sitecustomize":
        env["PYTHONPATH"] = os.pathsep.join([str(runner.SIMULATED_IMPORT_DIR), str(tmp_path)])
        env[runner.SIMULATE_ENV] = "1"
    elif route == "pth":
        code = f"exec({runner.simulation_pth_line()!r})\n" + CHECK
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=120, check=True,
    )  # fmt: skip
    data: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return data


def test_simulated_import_fakes_the_device_only_while_flashinfer_imports(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: nothing to simulate")
    # In a matrix cell that simulates the import, every Python of the venv is simulated.
    if not any(getattr(f, "fi_patches_simulated_device", False) for f in sys.meta_path):
        assert _run_fake_import(tmp_path, "off") == {"error": "AssertionError"}
    simulated = {"sms": 148, "major": 10, "restored": True, "runtime_query_raises": True}
    assert _run_fake_import(tmp_path, "sitecustomize") == simulated
    assert _run_fake_import(tmp_path, "pth") == simulated
