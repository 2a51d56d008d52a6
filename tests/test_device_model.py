"""One device model for ``doctor``, ``pins check`` and ``mxfp8.explain``: with
``FI_PATCHES_DEVICE=sm_100`` on CPU, all three give the same answer about ``pinned_cute_dsl``,
even after a process where FlashInfer's device queries answered (the tests' simulated device)
kept a passing self-check in the same cache, and ``explain`` reports, never raises."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests import lowlat
from tests.conftest import require_release_supports
from tests.forkserver import ForkServer

ROOT = Path(__file__).resolve().parent.parent
N, K = lowlat.SHAPE

TABLE = f"""[meta]
device = "*"
flashinfer = ">=0.7.0"

[[cute_dsl]]
n = {N}
k = {K}
max_rows = 64
tactic = [[128, 64], [1, 1], true, false, 1]
"""

SIMULATED_STATUS = """
import json, sys, pytest
sys.path.insert(0, {root!r})
from tests import simulation
patch = pytest.MonkeyPatch()
simulation.install(patch)  # SIMULATION: FlashInfer's device queries answer on CPU
import fi_patches
enabled = {{s.name: s.enabled for s in fi_patches.status()}}["pinned_cute_dsl"]
patch.undo()  # the device queries fail again, as on any CPU machine
from fi_patches import mxfp8
choice = mxfp8.explain({n}, {k}, rows=20, pins={table!r})
print(json.dumps([enabled, choice.route.value, choice.reason]))
"""

EXPLAIN = """
import json
from fi_patches import mxfp8
choice = mxfp8.explain({n}, {k}, rows=20, pins={table!r})
print(json.dumps([choice.route.value, choice.reason]))
"""


def _python(
    server: ForkServer, args: list[str], cwd: Path, cache: Path
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh process (a fork of one that imported torch alone)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.update(FI_PATCHES_DEVICE="sm_100", FI_PATCHES_CACHE_DIR=str(cache))
    done = server.run(args, env, cwd, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_doctor_pins_check_and_explain_agree_after_a_simulated_pass(tmp_path, forkserver):
    require_release_supports("pinned_tactics")  # the simulated pass runs its self-check
    table = tmp_path / "pins.toml"
    table.write_text(TABLE)
    cache = tmp_path / "cache"
    simulated = _python(
        forkserver,
        ["-c", SIMULATED_STATUS.format(root=str(ROOT), n=N, k=K, table=str(table))],
        tmp_path,
        cache,
    )
    assert simulated.returncode == 0, simulated.stderr
    enabled, route, reason = json.loads(simulated.stdout.splitlines()[-1])
    assert enabled  # the simulated device answered its self-check, and it was kept
    # ... and explain in that process, the device queries failing now, reports:
    assert route == "stock"
    assert "cannot run n=7168 k=1536 rows=20: checking it raised AssertionError" in reason

    doctor = _python(forkserver, ["-m", "fi_patches", "doctor", "--json"], tmp_path, cache)
    assert doctor.returncode == 0, doctor.stderr
    record = next(r for r in json.loads(doctor.stdout) if r["name"] == "pinned_cute_dsl")
    assert not record["enabled"]
    assert "cannot be checked without the device" in record["reason"]

    check = _python(forkserver, ["-m", "fi_patches", "pins", "check", str(table)], tmp_path, cache)
    assert check.returncode == 3, check.stdout + check.stderr  # unchecked, as doctor says
    [line] = [x for x in check.stdout.splitlines() if x.startswith("[[cute_dsl]] #1")]
    assert " unchecked " in line
    assert line.rstrip().endswith(f"pinned_cute_dsl is disabled here: {record['reason']}")

    explain = _python(
        forkserver, ["-c", EXPLAIN.format(n=N, k=K, table=str(table))], tmp_path, cache
    )
    assert explain.returncode == 0, explain.stderr
    route, reason = json.loads(explain.stdout)
    assert route == "stock"
    assert f"pinned_cute_dsl is off: {record['reason']}" in reason
