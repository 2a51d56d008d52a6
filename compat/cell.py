"""What the noxfile runs in each environment: the shared torch base, the newest release on the
registry, and one cell's test suite and doctor runs, written as JSON for ``compat/report.py``.

Everything here shells out to a given environment's Python, so the noxfile stays a list of
sessions and this module holds the logic (its pure parts are unit-tested)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compat.matrix import Cell, Matrix
from compat.outcomes import parse_junit

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".nox" / "compat"
RESULTS = STATE / "results"
LOGS = STATE / "logs"
BASE_FILE = STATE / "base.json"
RUN_FILE = STATE / "run.json"
SIMULATED_IMPORT_DIR = ROOT / "tests" / "simulated_import"
SIMULATED_DEVICE = SIMULATED_IMPORT_DIR / "simulated_device.py"
SIMULATE_ENV = "FI_PATCHES_SIMULATE_DEVICE_PROPERTIES"
# The cell's id, for its test run: tests/expected.py reads what the cell expects of each feature
# (a feature-gated test skips only where its cell expects the feature disabled).
CELL_ENV = "FI_COMPAT_CELL"
DISTRIBUTION = "flashinfer-python"
BASE_PTH = "_fi_compat_base.pth"
# No "fi_patches" in the name: tests/test_auto.py's temp venvs replay the test environment's
# .pth files except those, and their processes must be simulated too.
SIMULATION_PTH = "_fi_compat_simulated_import.pth"
# Variables that change what fi_patches reports; every run sets its own.
CONTROLLED_ENV = (
    "FI_PATCHES_DEVICE",
    "FI_PATCHES_ALLOW_UNVERIFIED",
    "FI_PATCHES_PINS",
    "FI_PATCHES_CACHE_DIR",
    SIMULATE_ENV,
    CELL_ENV,
    "PYTHONPATH",
)
TEST_TIMEOUT_S = 1200
DOCTOR_TIMEOUT_S = 300


class SetupError(RuntimeError):
    """An environment could not be built as the matrix needs (the message says why)."""


def _json_out(command: Sequence[str], timeout: float = 300) -> Any:
    """Run ``command`` and parse its standard output as JSON (stderr is pip's chatter)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SetupError(f"{' '.join(map(str, command))} exited {done.returncode}: {tail}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise SetupError(f"{command[0]} printed no JSON: {done.stdout[:200]!r}") from exc


def pip_report(python: str | Path, requirements: Sequence[str]) -> dict[str, Any]:
    """What ``pip install`` would install for ``requirements`` in an empty environment (a dry
    run: pip reads metadata but installs and, for PEP 658 indexes, downloads nothing)."""
    command = [
        str(python),
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        "-",
        *requirements,
    ]
    report: dict[str, Any] = _json_out(command)
    return report


def _installs(report: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (
            str(item["metadata"]["name"]),
            str(item["metadata"]["version"]),
            str(item.get("download_info", {}).get("url", "")),
        )
        for item in report.get("install", [])
    ]


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def cpu_torch_problem(report: Mapping[str, Any]) -> str | None:
    """None when the resolution's torch is a CPU build (local label ``+cpu``), else why not.

    A CUDA torch from PyPI is a multi-GB download with CUDA libraries; refuse it before pip
    fetches anything."""
    for name, version, url in _installs(report):
        if _canonical(name) == "torch":
            if "+cpu" in version:
                return None
            return (
                f"pip would install torch {version} from {url or 'an index'}, which is not a CPU "
                "build; refusing to download it. Make a torch==2.13.0+cpu wheel available "
                "(pip find-links or the PyTorch CPU index) or change `torch` in compat/matrix.toml."
            )
    return "the resolution installs no torch"


def base_requirements(report: Mapping[str, Any], exclude: Sequence[str]) -> list[str]:
    """``name==version`` pins for everything the resolution installs except ``exclude``."""
    skip = {_canonical(n) for n in exclude}
    return [f"{n}=={v}" for n, v, _ in _installs(report) if _canonical(n) not in skip]


def purelib(python: str | Path) -> Path:
    """The environment's site-packages."""
    code = "import sysconfig, json; print(json.dumps(sysconfig.get_paths()['purelib']))"
    return Path(_json_out([str(python), "-c", code]))


def attach_base(python: str | Path, base_site: str | Path) -> Path:
    """Make the base environment's packages visible to the environment of ``python``.

    A ``.pth`` line that calls ``site.addsitedir`` appends the base's site-packages after the
    child's own and processes the base's ``.pth`` files too (nvidia-cutlass-dsl puts ``cutlass``
    on ``sys.path`` through one). Packages the child installs itself shadow the base's. Plain
    ``--system-site-packages`` cannot do this: a venv made from a venv inherits the interpreter's
    site-packages, not the parent venv's."""
    target = purelib(python) / BASE_PTH
    target.write_text(f"import site; site.addsitedir({str(base_site)!r})\n")
    return target


def resolve_newest(python: str | Path) -> str:
    """The newest final release of flashinfer-python on the configured index, as pip would pick
    it for a plain ``pip install flashinfer-python`` (pre-releases excluded)."""
    report = pip_report(python, ["--no-deps", DISTRIBUTION])
    for name, version, _ in _installs(report):
        if _canonical(name) == DISTRIBUTION:
            return version
    raise SetupError("pip's report names no flashinfer-python")


def installed_versions(python: str | Path, names: Sequence[str]) -> dict[str, str | None]:
    """``name -> version`` as the environment's ``importlib.metadata`` sees it."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))"
    )
    found: dict[str, str | None] = _json_out([str(python), "-c", code, *names])
    return found


def simulation_pth_line() -> str:
    """The ``.pth`` line of tests/simulated_import/simulated_device.py (loaded by path: it is
    test code, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_fi_compat_simulated", SIMULATED_DEVICE)
    if spec is None or spec.loader is None:
        raise SetupError(f"cannot load {SIMULATED_DEVICE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    line: str = module.pth_line(str(SIMULATED_DEVICE))
    return line


def set_simulation(python: str | Path, active: bool) -> None:
    """Turn the simulated import on or off for every Python process of the environment.

    A ``.pth`` rather than ``PYTHONPATH``: tests that start interpreters with a scrubbed
    environment (no ``FI_PATCHES_*``, no ``PYTHONPATH``) must see the same FlashInfer."""
    path = purelib(python) / SIMULATION_PTH
    if active:
        path.write_text(simulation_pth_line())
    else:
        path.unlink(missing_ok=True)


def cell_env(cell: Cell, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a cell's processes run with: the outer one minus the variables that
    steer fi_patches (each run sets its own) and ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED_ENV}
    # Fresh verdicts in every run: a self-check outcome cached by one of the cell's tests (under
    # the tests' device simulation) must not answer the cell's doctor run.
    env["FI_PATCHES_CACHE_DIR"] = "off"
    env.update(extra or {})
    return env


def run_doctor(python: str | Path, env: Mapping[str, str], log: Path) -> dict[str, Any]:
    """``python -m fi_patches doctor --json`` in the cell: its records, time and any error."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            [str(python), "-m", "fi_patches", "doctor", "--json"],
            capture_output=True,
            text=True,
            env=dict(env),
            cwd=ROOT,
            timeout=DOCTOR_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"doctor ran over {DOCTOR_TIMEOUT_S} s", "seconds": DOCTOR_TIMEOUT_S}
    seconds = round(time.monotonic() - start, 2)
    log.write_text(f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return {"error": f"doctor exited {done.returncode}: {tail}", "seconds": seconds}
    try:
        records = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": f"doctor printed no JSON (see {log})", "seconds": seconds}
    return {"records": records, "seconds": seconds}


def run_tests(
    python: str | Path, env: Mapping[str, str], slug: str, paths: Sequence[str] = ()
) -> dict[str, Any]:
    """The README's tests (``python -m pytest -q``, on one worker) plus JUnit output, in the cell;
    ``paths`` narrows it to a focused subset (a DSL-axis cell's)."""
    junit = LOGS / f"{slug}.junit.xml"
    log = LOGS / f"{slug}.pytest.txt"
    junit.unlink(missing_ok=True)
    command = [
        str(python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        # Tests that cannot depend on the release (pure schema properties, the matrix's own
        # bookkeeping) run once, in the main run; so do the drift suite's reaction cases (an
        # internal renamed, raising, of the wrong shape, rebound: fi_patches' handling, run on
        # the newest release). Every cell runs the rest, each internal's removal and signature
        # change included.
        "-m",
        "not release_independent and not newest_release",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit1",
        *paths,
    ]
    start = time.monotonic()
    with log.open("w") as out:
        try:
            done = subprocess.run(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=ROOT,
                timeout=TEST_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"the test suite ran over {TEST_TIMEOUT_S} s", "cases": []}
    seconds = round(time.monotonic() - start, 2)
    tail = log.read_text().strip().splitlines()[-1:] or [""]
    result: dict[str, Any] = {"exit_code": done.returncode, "seconds": seconds, "summary": tail[0]}
    if not junit.exists():
        result["error"] = f"pytest exited {done.returncode} without JUnit output (see {log})"
        result["cases"] = []
        return result
    result["cases"] = [c.to_dict() for c in parse_junit(junit)]
    return result


def run_cell(
    cell: Cell,
    python: str | Path,
    flashinfer: str,
    setup_s: float,
    allow_unverified: bool,
) -> dict[str, Any]:
    """Run one cell in the environment of ``python`` (FlashInfer ``flashinfer`` installed) and
    return its result record."""
    LOGS.mkdir(parents=True, exist_ok=True)
    slug = cell.slug
    start = time.monotonic()
    set_simulation(python, cell.simulate_import)
    try:
        tests = run_tests(python, cell_env(cell, {CELL_ENV: cell.id}), slug, cell.tests)
        device = {"FI_PATCHES_DEVICE": "sm_103"}
        doctor = {
            "default": run_doctor(python, cell_env(cell, device), LOGS / f"{slug}.doctor.txt")
        }
        if allow_unverified:
            doctor["allow_unverified"] = run_doctor(
                python,
                cell_env(cell, {**device, "FI_PATCHES_ALLOW_UNVERIFIED": "1"}),
                LOGS / f"{slug}.doctor-allow-unverified.txt",
            )
    finally:
        set_simulation(python, False)
    return {
        "schema": 1,
        "cell": cell.id,
        "release": cell.flashinfer,
        "flashinfer": flashinfer,
        "simulate_import": cell.simulate_import,
        "dsl": cell.dsl or None,
        "alias_of": None,
        "tests": tests,
        "doctor": doctor,
        "timing": {
            "setup_s": round(setup_s, 2),
            "tests_s": tests.get("seconds", 0),
            "doctor_s": round(sum(d.get("seconds", 0) for d in doctor.values()), 2),
            "cell_s": round(time.monotonic() - start, 2),
        },
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "finished_ts": time.time(),
    }


def alias_result(cell: Cell, flashinfer: str, listed: str) -> dict[str, Any]:
    """The record for ``newest`` when it is a release the matrix already lists."""
    return {
        "schema": 1,
        "cell": cell.id,
        "release": cell.flashinfer,
        "flashinfer": flashinfer,
        "simulate_import": cell.simulate_import,
        "alias_of": listed,
        "timing": {"setup_s": 0.0, "tests_s": 0.0, "doctor_s": 0.0, "cell_s": 0.0},
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "finished_ts": time.time(),
    }


def error_result(cell: Cell, error: str, setup_s: float = 0.0) -> dict[str, Any]:
    """The record for a cell whose environment could not be built."""
    return {
        "schema": 1,
        "cell": cell.id,
        "release": cell.flashinfer,
        "flashinfer": None,
        "simulate_import": cell.simulate_import,
        "alias_of": None,
        "error": error,
        "timing": {"setup_s": round(setup_s, 2), "tests_s": 0.0, "doctor_s": 0.0, "cell_s": 0.0},
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "finished_ts": time.time(),
    }


def write_result(result: Mapping[str, Any], cell: Cell) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{cell.slug}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def read_results(matrix: Matrix) -> dict[str, dict[str, Any]]:
    """Cell id -> its result, for the cells of ``matrix`` that have one on disk."""
    found = {}
    for cell in matrix.cells:
        path = RESULTS / f"{cell.slug}.json"
        if path.exists():
            found[cell.id] = json.loads(path.read_text())
    return found


def start_run() -> None:
    """Forget the previous run's results and note when this one began."""
    for path in RESULTS.glob("*.json") if RESULTS.exists() else ():
        path.unlink()
    BASE_FILE.unlink(missing_ok=True)
    STATE.mkdir(parents=True, exist_ok=True)
    RUN_FILE.write_text(json.dumps({"started": time.time()}) + "\n")


def write_base(info: Mapping[str, Any]) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    BASE_FILE.write_text(json.dumps(info, indent=2) + "\n")


def read_base() -> dict[str, Any]:
    if not BASE_FILE.exists():
        raise SetupError(f"no base environment recorded ({BASE_FILE}); run `nox -s base` first")
    info: dict[str, Any] = json.loads(BASE_FILE.read_text())
    if not Path(info["site"]).is_dir():
        raise SetupError(f"the base environment's {info['site']} is gone; run `nox -s base`")
    return info


def read_run() -> dict[str, Any]:
    return json.loads(RUN_FILE.read_text()) if RUN_FILE.exists() else {}


def machine() -> dict[str, Any]:
    """A line's worth about where the matrix ran, for RESULTS.md."""
    import platform

    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "executable": sys.executable,
    }
