"""A serving process stays lean: tuning and serving a ``[[pin]]``ed op (``FI_PATCHES_PINS``,
FlashInfer's real tuner under ``flashinfer.autotune``, CPU profiling simulated) loads few
fi_patches modules and no tooling, and its feature evaluation on a release the compat matrix
ran takes the matrix's verdict for the verification steps: FlashInfer's tuner-cache writers are
never called and no PTX/cubin reader is loaded. On a release no matrix cell ran (a real
``flashinfer_python-0.7.3.dist-info`` ahead of the installed one) it still runs them, and the
reason says so. Each process is a fresh interpreter; FlashInfer's writers are observed through a
``sitecustomize`` that records their calls (nothing of fi_patches is replaced)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

from tests.child_script import REPORT, run_reporting
from tests.conftest import flashinfer_or_skip, require_release_supports

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULES = 30
"""What a serving process may load today: 30 (38 before the merges of pins' errors, tuner_pin,
default and the limits, the automatic rank guard, the self-checks, the features' declarations and
the tune group's internals; 48 after the restructure of 2026-12-05's first merges, 60 before
it). Issue 29 asks for 30; the budget only ever goes down."""
TOOLING = (
    "fi_patches.cli",
    "fi_patches.chain",
    "fi_patches.tools",
    "fi_patches.__main__",
)
"""Modules (and packages) only tooling imports."""
PTX_READERS = ("fi_patches.wide.ptx", "fi_patches.tools.wide_resources")

SERVE = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
import pytest
import fi_patches.auto
import flashinfer
from tests import toy_op

toy_op.start(pytest.MonkeyPatch(), 1)
with flashinfer.autotune(True):
    toy_op.warm_up((8,))
toy_op.RAN.calls.clear()
toy_op.warm_up((8,))
from fi_patches import activation
loaded = sorted(m for m in sys.modules if m.startswith("fi_patches"))
print({REPORT!r} + json.dumps({{"modules": loaded, "outcome": activation.outcome(),
      "ran": toy_op.RAN.calls}}))
"""

EVALUATE = f"""
import json, sys
from fi_patches.compat import status_of
records = {{name: status_of(name) for name in sys.argv[1:]}}
print({REPORT!r} + json.dumps({{
    "records": {{n: [r.enabled, r.reason] for n, r in records.items()}},
    "modules": sorted(m for m in sys.modules if m.startswith("fi_patches")),
}}))
"""

SITECUSTOMIZE = """
import functools, json, os

def _watch(owner, name):
    original = getattr(owner, name)

    @functools.wraps(original)
    def watched(*args, **kwargs):
        with open(os.environ["WRITES_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps(name) + "\\n")
        return original(*args, **kwargs)

    setattr(owner, name, watched)

import flashinfer.autotune_cache as _store
import flashinfer.autotuner as _tuner

_watch(_tuner.AutoTuner, "save_configs")
_watch(_store.ManagedAutotuneCache, "publish")
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    path = [str(tmp_path / "site"), str(ROOT), env.get("PYTHONPATH", "")]
    env.update(PYTHONPATH=os.pathsep.join(filter(None, path)), FI_PATCHES_CACHE_DIR="off")
    env.update(WRITES_LOG=str(tmp_path / "writes.log"), **extra)
    return env


def _site(tmp_path: Path, version: str | None = None) -> None:
    """The ``sitecustomize`` watching FlashInfer's writers, and (with ``version``) a real
    dist-info that makes the installed FlashInfer read as that release."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE), encoding="utf-8")
    if version is not None:
        dist = site / f"flashinfer_python-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n",
            encoding="utf-8",
        )


def _writes(tmp_path: Path) -> list[str]:
    log = tmp_path / "writes.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def test_serving_a_pinned_op_loads_few_modules_and_no_tooling(tmp_path):
    flashinfer_or_skip()
    require_release_supports("pinned_ops")
    from tests import toy_op

    pins = tmp_path / "pins.toml"
    pins.write_text(
        textwrap.dedent(
            f"""
            [meta]
            device = "*"
            flashinfer = ""
            [[pin]]
            op = "{toy_op.OP}"
            runner = "ToySplitRunner"
            shapes = [["rows", {toy_op.K}], [{toy_op.K}, {toy_op.WEIGHTS[0]}]]
            min_rows = 8
            max_rows = 8
            tactic = 2
            """
        ),
        encoding="utf-8",
    )
    script = tmp_path / "serve.py"
    script.write_text(SERVE, encoding="utf-8")
    report, log = run_reporting(script, _env(tmp_path, FI_PATCHES_PINS=str(pins)), tmp_path)
    assert report["outcome"].startswith("pinning the [[pin]] entries"), (report["outcome"], log)
    assert ["ToySplitRunner", 8, 2] in report["ran"], report["ran"]  # the pin served
    loaded = report["modules"]
    tooling = [m for m in loaded if m.startswith(TOOLING)]
    listing = "\n".join(loaded)
    assert not tooling, f"a serving process loaded tooling {tooling}; it loaded:\n{listing}"
    assert len(loaded) <= MAX_MODULES, (
        f"a serving process loaded {len(loaded)} fi_patches modules (at most {MAX_MODULES}):\n"
        f"{listing}"
    )


def _evaluate(tmp_path: Path, *features: str) -> dict:
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE, encoding="utf-8")
    env = _env(tmp_path, FI_PATCHES_DEVICE="sm_103")
    import subprocess

    result = subprocess.run(
        [sys.executable, str(script), *features],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith(REPORT))
    report: dict = json.loads(line[len(REPORT) :])
    return report


def test_serving_evaluation_on_a_matrix_release_writes_no_tuner_cache_and_reads_no_ptx(tmp_path):
    """On the installed release (one the compat matrix ran) the verdicts are the matrix's: the
    features are enabled as verified, and neither FlashInfer's cache writers nor a PTX, cubin
    or ptxas reader ran (nor the wide kernel's compile)."""
    from fi_patches.compat.features import installed_flashinfer
    from fi_patches.internals.flashinfer import FLASHINFER

    flashinfer_or_skip()
    require_release_supports("pinned_ops")
    require_release_supports("wide_tile")
    assert installed_flashinfer().version_text in FLASHINFER.releases
    _site(tmp_path)
    report = _evaluate(tmp_path, "pinned_ops", "preseed", "wide_tile")
    for name, (enabled, reason) in report["records"].items():
        assert enabled, (name, reason)
        assert " is verified" in reason or " are verified" in reason, (name, reason)
        assert "Off the compat matrix" not in reason, (name, reason)
    assert _writes(tmp_path) == []
    read = [m for m in report["modules"] if m in PTX_READERS or m == "fi_patches.wide.kernel"]
    assert read == [], read


def test_an_unverified_release_still_runs_the_verification_and_says_so(tmp_path):
    """A release no matrix cell ran (0.7.3 here) gets no verdict from the matrix: the serving
    evaluation writes its two temporary caches through FlashInfer's own writers, and the
    reason names what it ran."""
    from fi_patches.internals.flashinfer import FLASHINFER

    flashinfer_or_skip()
    require_release_supports("pinned_ops")
    assert "0.7.3" not in FLASHINFER.releases
    _site(tmp_path, "0.7.3")
    report = _evaluate(tmp_path, "pinned_ops")
    enabled, reason = report["records"]["pinned_ops"]
    assert enabled, reason
    assert reason.startswith("FlashInfer 0.7.3 is not in the compat matrix;"), reason
    assert (
        "Off the compat matrix, this process also ran the round trip of FlashInfer's "
        "tuner-cache writers" in reason
    ), reason
    assert sorted(_writes(tmp_path)) == ["publish", "save_configs"]
