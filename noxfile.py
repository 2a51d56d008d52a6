# /// script
# dependencies = ["nox>=2024.4.15"]
# ///
"""The FlashInfer compat matrix (``compat/matrix.toml``), one nox session per release, and the
vLLM integration's tests against the real vLLM.

``nox -s matrix`` (also plain ``nox``, or ``python -m compat.run``) runs, in order: ``base`` (a
venv with the CPU torch and the dependencies every release shares), ``cell(<release>)`` for each
release (a venv that sees the base, with ``flashinfer-python==<release>`` and the project's
test extra: the test suite and ``doctor --json`` per cell) and ``report`` (``compat/RESULTS.md``;
fails when any cell disagrees with the matrix). The logic lives in ``compat/``; this file only
wires sessions.

``nox -s vllm`` builds a venv of its own with vLLM (never the default test venv) and runs the
tests that need it (``tests/vllm``); ``nox -s sglang`` does the same for SGLang
(``tests/sglang``).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nox
from nox.command import CommandFailed

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from packaging.version import Version  # noqa: E402

from compat import cell as runner  # noqa: E402
from compat import report as reporting  # noqa: E402
from compat.matrix import NEWEST, check_cell, load  # noqa: E402

nox.needs_version = ">=2024.4.15"  # requires=
# pip, not uv: uv ignores pip.conf, so it neither sees the machine's CPU torch wheel (find-links)
# nor its constraints, and `uv pip install torch==2.13.0` resolves PyPI's CUDA build.
nox.options.default_venv_backend = "venv"
nox.options.sessions = ["matrix"]

MATRIX = load()
ENVIRONMENTS = MATRIX.environments()
DSL = "nvidia-cutlass-dsl"
RESULTS_MD = ROOT / "compat" / "RESULTS.md"
DISCARD = "NOX_DISCARD_ENVS"
"""Set (``.ci/run`` sets it): a release's cell and the vLLM and SGLang sessions remove their
venv when they end, passed or failed, so a run holds one of them at a time beside the base
(cells take 0.1-0.8 GB each, the host environments about 4 GB): with all of them kept, .nox
reached 15 GB in a fresh-clone CI run. Unset, venvs stay for ``nox -R``."""


def _discards_venv(body: Callable[..., None]) -> Callable[..., None]:
    """A session that, once its ``body`` ends (passed or failed), removes its venv where
    :data:`DISCARD` asks to."""

    @functools.wraps(body)
    def session_body(session: nox.Session, **params: Any) -> None:
        try:
            body(session, **params)
        finally:
            location = getattr(session.virtualenv, "location", None)
            if os.environ.get(DISCARD) and location:
                shutil.rmtree(location, ignore_errors=True)

    return session_body


@nox.session(python=False)
def matrix(session: nox.Session) -> None:
    """Every cell, one after another, then the report (which fails on any mismatch)."""
    runner.start_run()
    session.notify("base")
    for environment in ENVIRONMENTS:
        session.notify(f"cell({environment})")
    session.notify("report")


@nox.session
def base(session: nox.Session) -> None:
    """The shared environment: torch (CPU build only) plus what the newest listed release and
    the project's test extra resolve to, minus FlashInfer and the project themselves."""
    start = time.monotonic()
    python = Path(session.bin) / "python"
    anchor = max(MATRIX.listed_releases(), key=Version)
    try:
        report = runner.pip_report(
            python,
            [MATRIX.torch, f"{runner.DISTRIBUTION}=={anchor}", "-e", f"{ROOT}[{MATRIX.extras}]"],
        )
    except runner.SetupError as exc:
        session.error(str(exc))
    problem = runner.cpu_torch_problem(report)
    if problem:
        session.error(problem)
    pins = runner.base_requirements(report, exclude=[runner.DISTRIBUTION, "fi_patches"])
    requirements = runner.STATE / "base-requirements.txt"
    requirements.parent.mkdir(parents=True, exist_ok=True)
    requirements.write_text("\n".join(pins) + "\n")
    session.install("--no-deps", "-r", str(requirements))
    torch = runner.installed_versions(python, ["torch"])["torch"] or ""
    if "+cpu" not in torch:
        session.error(f"the base environment has torch {torch!r}, not a CPU build")
    runner.write_base(
        {
            "site": str(runner.purelib(python)),
            "torch": torch,
            "requirements": pins,
            "anchor": anchor,
            "seconds": round(time.monotonic() - start, 2),
        }
    )


@nox.session(requires=["base"])
@nox.parametrize("environment", ENVIRONMENTS, ids=ENVIRONMENTS)
@_discards_venv
def cell(session: nox.Session, environment: str) -> None:
    """One release (with its DSL pinned, on the DSL axis): install it over the base, then run
    each of its cells."""
    start = time.monotonic()
    cells = MATRIX.cells_in(environment)
    release, dsl = cells[0].flashinfer, cells[0].dsl
    python = Path(session.bin) / "python"
    try:
        base_info = runner.read_base()
        runner.attach_base(python, base_info["site"])
        version = release
        if release == NEWEST:
            version = runner.resolve_newest(python)
            listed = MATRIX.listed_as(version)
            if listed is not None:
                for c in cells:
                    runner.write_result(runner.alias_result(c, version, listed), c)
                session.log(f"newest flashinfer-python is {version}, listed as {listed}")
                return
        constraint = runner.STATE / "torch-constraint.txt"
        constraint.write_text(f"torch=={base_info['torch']}\n")
        pinned = [f"{DSL}[cu13]=={dsl}"] if dsl else []  # vLLM and SGLang pin [cu13]
        session.install("-c", str(constraint), f"{runner.DISTRIBUTION}=={version}", *pinned)
        session.install("-c", str(constraint), *pinned, "-e", f".[{MATRIX.extras}]")
        found = runner.installed_versions(python, [runner.DISTRIBUTION, "torch", DSL])
        if (
            found[runner.DISTRIBUTION] != version
            or found["torch"] != base_info["torch"]
            or (dsl and found[DSL] != dsl)
        ):
            raise runner.SetupError(
                f"the environment has {found}, not {version} (DSL {dsl or 'any'}) over the base"
            )
    except (runner.SetupError, CommandFailed) as exc:
        for c in cells:
            runner.write_result(runner.error_result(c, str(exc), time.monotonic() - start), c)
        session.error(str(exc))
    setup_s = time.monotonic() - start
    problems = []
    for index, c in enumerate(cells):
        result = runner.run_cell(
            c,
            python,
            version,
            setup_s if index == 0 else 0.0,
            allow_unverified=c.expect_allow_unverified is not None,
        )
        runner.write_result(result, c)
        check = check_cell(MATRIX, c, result)
        session.log(f"{c.id}: {result['tests'].get('summary', '')}; {len(check.problems)} problems")
        problems += [f"{c.id}: {p}" for p in check.problems]
    if problems:
        session.error("\n".join(problems))


@nox.session(python=False)
def report(session: nox.Session) -> None:
    """Write compat/RESULTS.md from the recorded results; fail if any cell disagrees."""
    results = runner.read_results(MATRIX)
    base_info = runner.read_base() if runner.BASE_FILE.exists() else None
    text, problems = reporting.render(
        MATRIX, results, base=base_info, run=runner.read_run(), machine=runner.machine()
    )
    RESULTS_MD.write_text(text)
    session.log(f"wrote {RESULTS_MD.relative_to(ROOT)}")
    if problems:
        session.error(f"{len(problems)} problem(s):\n" + "\n".join(problems))


VLLM = "vllm==0.34.0"
VLLM_FLASHINFER = "flashinfer-python==0.7.4"
VLLM_TESTS = ("tests/vllm", "tests/test_vllm_settings.py")


def _host_environment(session: nox.Session, host: str, requirements: Path, label: str) -> None:
    """A venv of the CPU torch (held), FlashInfer 0.7.4, the project's test extra and the
    ``requirements`` the host's imported modules need, then ``host`` itself without its
    dependencies (they pull a CUDA torch); then ``doctor``."""
    start = time.monotonic()
    held = Path(session.create_tmp()) / "torch.txt"
    held.write_text(f"{MATRIX.torch}\n")
    # torch first and held: the machine's CPU wheel; anything looser resolves a CUDA build.
    session.install("-q", MATRIX.torch)
    session.install(
        "-q", "-c", str(held), VLLM_FLASHINFER, "-e", f"{ROOT}[test]", "-r", str(requirements)
    )
    session.install("-q", "--no-deps", host)
    python = Path(session.bin) / "python"
    name = host.split("==")[0]
    found = runner.installed_versions(python, ["torch", name, runner.DISTRIBUTION])
    if "+cpu" not in (found["torch"] or ""):
        session.error(f"the {label} environment has torch {found['torch']!r}, not a CPU build")
    session.log(f"{label} environment ready in {time.monotonic() - start:.0f} s: {found}")
    session.run("python", "-m", "fi_patches", "doctor", env={"FI_PATCHES_DEVICE": "sm_103"})


@nox.session
@_discards_venv
def vllm(session: nox.Session) -> None:
    """The vLLM integration against the real vLLM on CPU: vLLM installed without its
    dependencies plus the few its plugin loader and MXFP8 kernel module import
    (``tests/vllm/requirements.txt``), then ``doctor`` and the vLLM tests."""
    _host_environment(session, VLLM, ROOT / "tests" / "vllm" / "requirements.txt", "vLLM")
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *VLLM_TESTS)


SGLANG = "sglang==0.5.23"
SGLANG_TESTS = ("tests/sglang",)


@nox.session
@_discards_venv
def sglang(session: nox.Session) -> None:
    """The SGLang plugin against the real SGLang on CPU: SGLang installed without its
    dependencies plus the few ``import sglang.srt.plugins`` needs
    (``tests/sglang/requirements.txt``), then ``doctor``, the SGLang tests and the drift cases
    of the SGLang internals (absent, so not run, in the main run)."""
    _host_environment(session, SGLANG, ROOT / "tests" / "sglang" / "requirements.txt", "SGLang")
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *SGLANG_TESTS)
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/drift", "-k", "sglang"
    )
