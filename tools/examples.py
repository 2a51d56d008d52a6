"""Generate the example files shipped in ``fi_patches/examples/``: ``python -m tools.examples``
says whether the shipped files are what this generator produces, ``--write`` rewrites them.

Each file comes from FlashInfer's own tuner (or fi_patches' ``tune``) on CPU, with only the
device and the kernel timing simulated (``tests/simulation.py``), in a child process per file
(a v2 store stays attached to the process that tuned with it). What the comparison ignores:
the environment fields FlashInfer writes beside the entries (``_metadata`` but its
``flashinfer_version``, the v2 manifest likewise, and the store's environment folder name),
and a v1 file's ``_generation``, FlashInfer's hash over the whole file with that environment
(it differs between two virtual environments of the same packages)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "fi_patches" / "examples"

SHAPES = ((2112, 7168), (6144, 1536), (7168, 4096))
"""The (n, k) weights of the shipped chain ``deepseek_v3_tp4``."""

FILES = ("rank0.json", "rank1.json", "tuner_store", "deepseek_v3_tp4.timings.json")

_CHILD = """
import os, sys
sys.path.insert(0, {root!r})
os.environ["FI_PATCHES_DEVICE"] = "sm_103"
os.environ["FI_PATCHES_CACHE_DIR"] = "off"
import pytest
from tests import simulation
simulation.install(pytest.MonkeyPatch())  # SIMULATION: device-only helpers on CPU
from tools.examples import child
child({what!r}, {out!r})
"""


def _rank1_time(tactic: Any) -> float:
    """Another rank's timing: every split-K tactic wins as on rank 0, the larger split by a hair
    (so the ranks pick different split-K tactics, as near-tied tactics do on real ranks)."""
    if isinstance(tactic, tuple) and len(tactic) in (4, 5) and isinstance(tactic[-1], int):
        return 0.5 - 0.001 * tactic[-1] if tactic[-1] > 1 else 1.0
    return 1.0


def _tune_projections() -> None:
    import flashinfer
    import torch

    from tests.mxfp8_inputs import Mxfp8Problem

    for n, k in SHAPES:
        for backend, rows in (("cutedsl_low_latency", 8), ("cute-dsl", 128)):
            # the kernel launch fails on CPU; the tuner has chosen by then
            with contextlib.suppress(AssertionError):
                flashinfer.mm_mxfp8(
                    *Mxfp8Problem(n, k, rows).mm_args(), out_dtype=torch.bfloat16, backend=backend
                )


def _numbers(tactic: Any) -> list[int]:
    if isinstance(tactic, (list, tuple)):
        return [x for part in tactic for x in _numbers(part)]
    return [int(tactic)]


def _chain_cost(trial: Any) -> float:
    """Microseconds of a chain sample: 10 per op; a split-K tactic saves 1 alone and costs 3
    when another op follows it (it delays the next op's start); tactics differ otherwise by up
    to 0.06 (ties at the chain's 1% tolerance)."""
    total = 0.0
    for position, tactic in enumerate(trial.tactics):
        numbers = _numbers(tactic)
        split = numbers[-1] > 1
        total += 10.0 - (1.0 if split else 0.0) + 0.01 * (sum(numbers) % 7)
        if split and position + 1 < len(trial.tactics):
            total += 3.0
    return round(total, 3)


def child(what: str, out: str) -> None:
    """Produce one example file at ``out`` (run in a child process, simulation installed)."""
    import flashinfer
    from flashinfer.autotuner import AutoTuner

    if what == "rank0.json":
        with flashinfer.autotune(True):
            _tune_projections()
        AutoTuner.get().save_configs(out)
    elif what == "rank1.json":
        from tests import simulation

        simulation.simulated_time = _rank1_time
        with flashinfer.autotune(True):
            _tune_projections()
        AutoTuner.get().save_configs(out)
    elif what == "tuner_store":
        with flashinfer.autotune_v2(mode="tune", cache_root=out):
            _tune_projections()
    elif what == "deepseek_v3_tp4.timings.json":
        import fi_patches
        from fi_patches.chain.plan import build_plan
        from fi_patches.chain.select import tune
        from fi_patches.chain.spec import ChainSpec, chain_path
        from fi_patches.chain.timing import RecordingTimer
        from fi_patches.pinning import stack
        from tests.chain_helpers import CostTimer

        fi_patches.refresh()
        spec = ChainSpec.from_file(chain_path("deepseek_v3_tp4"))
        plan = build_plan(spec, sm_version=103)
        recorder = RecordingTimer(CostTimer(_chain_cost))
        with stack.isolated():
            tune(plan, recorder, spec.settings)
        Path(out).write_text(
            recorder.text(device="sm_103", flashinfer=flashinfer.__version__), encoding="utf-8"
        )
    else:
        raise ValueError(f"no example {what!r}")


def generate(folder: Path) -> None:
    """Write every example file into ``folder``."""
    for what in FILES:
        script = _CHILD.format(root=str(ROOT), what=what, out=str(folder / what))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
        result = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
            env=env,
            timeout=900,
        )
        if result.returncode != 0:
            raise SystemExit(f"generating {what} failed:\n{result.stderr[-3000:]}")


def _store_content(root: Path) -> dict[str, Any]:
    manifests = sorted(root.glob("v2/*/manifest.json"))
    entries = sorted(root.glob("v2/*/entries/*.json"))
    return {
        "manifests": [_kept(json.loads(m.read_text())) for m in manifests],
        "entries": {e.name: json.loads(e.read_text()) for e in entries},
    }


def _kept(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k in ("flashinfer_version", "cache_schema")}


def content(folder: Path) -> dict[str, Any]:
    """What of the example files in ``folder`` the comparison covers (see the module doc)."""
    found: dict[str, Any] = {}
    for what in FILES:
        path = folder / what
        if not path.exists():
            found[what] = None
        elif path.is_dir():
            found[what] = _store_content(path)
        else:
            data = json.loads(path.read_text())
            if "_metadata" in data:
                data["_metadata"] = _kept(data["_metadata"])
            data.pop("_generation", None)
            found[what] = data
    return found


def differing(folder: Path = EXAMPLES) -> list[str]:
    """The example files in ``folder`` that differ from what the generator produces now."""
    with tempfile.TemporaryDirectory() as fresh:
        generate(Path(fresh))
        made, shipped = content(Path(fresh)), content(folder)
    return [what for what in FILES if made[what] != shipped[what]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.examples", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite fi_patches/examples/")
    args = parser.parse_args(argv)
    if args.write:
        with tempfile.TemporaryDirectory() as fresh:
            generate(Path(fresh))
            for what in FILES:
                target = EXAMPLES / what
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
                shutil.move(str(Path(fresh) / what), target)
        print(f"wrote {', '.join(FILES)} in {EXAMPLES}")
        return 0
    stale = differing()
    print(f"stale in {EXAMPLES}: {', '.join(stale)}" if stale else f"{EXAMPLES} is up to date")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
