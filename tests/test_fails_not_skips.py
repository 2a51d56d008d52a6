"""FAULT INJECTION: a fault that disables a feature this environment expects enabled makes the
feature's tests fail, naming the compat layer's reason, instead of skipping.

The fault is real and importable: a ``sitecustomize`` first on ``PYTHONPATH`` of a child pytest
run puts an ``__init_subclass__`` on FlashInfer's ``TunableRunner`` (as another library patching
FlashInfer might) that refuses to create the low-latency MXFP8 runner class. FlashInfer then
cannot build that runner, so the compat layer disables ``pinned_tactics``; nothing of
fi_patches is touched."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compat.outcomes import parse_junit
from tests import expected

ROOT = Path(__file__).resolve().parent.parent
MARK = "FAULT INJECTED by tests/test_fails_not_skips.py"

FAULT = f'''
"""{MARK}: refuse to create FlashInfer's low-latency MXFP8 runner class."""
import sys

TARGET = "flashinfer.autotuner"


def _break(module):
    base = module.TunableRunner

    def __init_subclass__(cls, **kwargs):
        super(base, cls).__init_subclass__(**kwargs)
        if cls.__name__ == "CutedslLowLatencyBlockscaledGemmRunner":
            raise RuntimeError("{MARK}")

    base.__init_subclass__ = classmethod(__init_subclass__)


class _AfterImport:
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _break(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterImport())
'''

FILES = ("tests/test_pinned_tactics.py", "tests/test_compat.py")


def test_a_feature_disabled_by_a_fault_fails_its_tests_rather_than_skipping(
    tmp_path: Path,
) -> None:
    if not expected.expects_enabled("pinned_tactics"):
        pytest.skip(f"this environment does not expect pinned_tactics enabled ({expected.where()})")
    fault = tmp_path / "fault"
    fault.mkdir()
    (fault / "sitecustomize.py").write_text(textwrap.dedent(FAULT))
    junit = tmp_path / "junit.xml"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(fault), str(ROOT)])
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FILES),
            *(f"--junitxml={junit}", "-o", "junit_family=xunit1"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert junit.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    cases = parse_junit(junit)
    assert done.returncode == 1, done.stdout[-3000:]
    gated = [c for c in cases if "pinned_tactics" in c.message and c.outcome != "passed"]
    skipped = [c.nodeid for c in gated if c.outcome == "skipped"]
    assert not skipped, f"skipped though pinned_tactics is expected enabled: {skipped}"
    # pytest.fail in a fixture reads as an error of the test's setup: either fails the run.
    failed = [c for c in cases if c.outcome in ("failed", "error")]
    names = {c.nodeid.split("::")[-1] for c in failed}
    # The never-skipped verdict test and the pinning fixture's users fail, with the reason.
    assert "test_every_feature_has_the_verdict_this_environment_expects" in names
    assert "test_runner_made_before_the_context_offers_only_the_pin" in names, sorted(names)
    assert "test_eight_threads_each_see_their_own_pins" in names, sorted(names)
    assert len(failed) >= 10, sorted(names)
    for case in failed:
        assert "pinned_tactics" in case.message and MARK in case.message, case
