"""Python 3.10, the floor ``requires-python`` advertises: ``.ci/py310_check.sh`` installs this
project's wheel on 3.10 without torch or FlashInfer and runs ``doctor``, ``pins check`` on the
docs' pin tables, ``hook status`` and ``import fi_patches.auto`` there. ``.ci/run`` makes that
environment (``.venv-py310``, its dependencies from the registry); this test reuses it offline
and is skipped where it was not made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-py310"


@pytest.mark.release_independent
def test_the_wheel_works_on_python_3_10():
    if not (VENV / "bin" / "python").is_file():
        pytest.skip(f"no Python 3.10 environment at {VENV} (.ci/run makes it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env["BUILD_PYTHON"] = sys.executable
    done = subprocess.run(
        [str(ROOT / ".ci" / "py310_check.sh"), str(VENV)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("py310_check: the wheel works on 3.10.")
