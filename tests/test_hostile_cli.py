"""Bad pin files end to end, each in a fresh process (a fork of one that imported torch alone,
``tests/forkserver.py``) with the real FlashInfer and ``FI_PATCHES_DEVICE=sm_103``: ``doctor``
exits 0 and names the problem, ``pins check`` exits 1 with one line, and ``import
fi_patches.auto`` leaves FlashInfer stock (the low-latency runner offers its stock list) after
one logged line. None prints a traceback."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fi_patches.pins.reading import MAX_FILE_BYTES
from tests import lowlat
from tests.conftest import flashinfer_or_skip
from tests.forkserver import ForkServer

N, K = lowlat.SHAPE
ROOT = Path(__file__).resolve().parent.parent
META = '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n'
ENTRY = f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\n"

BAD_FILES: dict[str, tuple[bytes, str]] = {
    "null_meta.json": (
        b'{"meta": {"device": null, "flashinfer": ">=0.7.0"}}',
        "[meta]: device = null: must be a string, not null",
    ),
    "null_entry.json": (
        json.dumps(
            {
                "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
                "low_latency": [
                    {"n": N, "k": None, "min_rows": 5, "max_rows": 8, "tactic": [128, 8, 1, 1]}
                ],
            }
        ).encode(),
        "[[low_latency]] #1: k = null: must be an integer, not null",
    ),
    "latin1.toml": (
        (META + 'note = "caf\xe9"\n').encode("latin-1"),
        "file: is not UTF-8 text (byte 0xe9 at line 4",
    ),
    "deep.json": (b'{"meta": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "JSON: nests too deeply"),
    "deep.toml": (
        (META + "note = " + "[" * 50_000 + "]" * 50_000 + "\n").encode(),
        "TOML: nests too deeply",
    ),
    "huge_int.toml": (
        (
            META + ENTRY.replace(f"n = {N}", "n = " + "9" * 5000) + "tactic = [128, 8, 1, 1]\n"
        ).encode(),
        "TOML: holds a value too long to read",
    ),
    "huge_int.json": (
        b'{"meta": {"device": "sm_103", "flashinfer": ">=0.7.0"}, "low_latency": [{"n": '
        + b"9" * 5000
        + f', "k": {K}, "max_rows": 8, "tactic": [128, 8, 1, 1]}}]}}'.encode(),
        "[[low_latency]] #1: n = <integer of 5000 digits>: must be between 1 and",
    ),
    "k_2_40.toml": (
        (META + ENTRY.replace(f"k = {K}", f"k = {2**40}") + "tactic = [128, 8, 1, 1]\n").encode(),
        "[[low_latency]] #1: k = 1099511627776: must be between 1 and 262144",
    ),
    "oversize.toml": (
        (META + "# padding\n" * (MAX_FILE_BYTES // 10 + 1)).encode(),
        f"file: is larger than {MAX_FILE_BYTES} bytes",
    ),
    "truncated.toml": ((META + ENTRY + "tactic = [128, 8,").encode(), "TOML: "),
    "garbage.json": (bytes(range(256)) * 4, "file: is not UTF-8 text"),
    "typo.toml": (
        (META + ENTRY.replace("max_rows", "max_row") + "tactic = [128, 8, 1, 1]\n").encode(),
        "[[low_latency]] #1: max_row = 8: is not a known field; did you mean max_rows?",
    ),
}

CONSUMER = f"""
import json, logging
import fi_patches.auto
import flashinfer
from fi_patches.activation import outcome
from fi_patches.internals import flashinfer as fi
from tests import lowlat
report = {{"outcome": outcome(), "offered": None, "stock": None}}
if fi.LOW_LATENCY_RUNNER.present():  # releases before the low-latency backend lack it
    report["offered"] = lowlat.offered(lowlat.runner(), {N}, {K}, 8)
    report["stock"] = lowlat.stock({N}, {K}, 8)
print(json.dumps(report))
"""

EVERY_MODE = (
    "null_meta.json",
    "null_entry.json",
    "latin1.toml",
    "deep.json",
    "huge_int.toml",
    "k_2_40.toml",
    "oversize.toml",
    "truncated.toml",
    "garbage.json",
)
"""The files run through ``doctor`` and ``fi_patches.auto`` too (each imports FlashInfer, some
seconds); ``pins check`` refuses every file before importing it, so it runs them all."""

MODES = {
    "doctor": ["-m", "fi_patches", "doctor"],
    "check": ["-m", "fi_patches", "pins", "check", "{path}"],
    "auto": ["-c", CONSUMER],
}


def run(server: ForkServer, mode: str, path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.update(FI_PATCHES_DEVICE="sm_103", FI_PATCHES_PINS=str(path), PYTHONPATH=str(ROOT))
    args = [arg.replace("{path}", str(path)) for arg in MODES[mode]]
    return server.run(args, env, ROOT, timeout=300)


@pytest.fixture(scope="module")
def outcomes(
    tmp_path_factory: pytest.TempPathFactory, forkserver: ForkServer
) -> dict[tuple[str, str], Any]:
    """Every (file, mode) run once, two processes at a time (forks of a process that imported
    torch, which neither doctor nor ``fi_patches.auto`` reads at import)."""
    flashinfer_or_skip()
    folder = tmp_path_factory.mktemp("bad_pins")
    jobs = []
    for name, (body, _) in BAD_FILES.items():
        path = folder / name
        path.write_bytes(body)
        jobs += [(name, mode, path) for mode in MODES if mode == "check" or name in EVERY_MODE]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            (name, mode): pool.submit(run, forkserver, mode, path) for name, mode, path in jobs
        }
        return {key: (future.result(), folder / key[0]) for key, future in futures.items()}


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize("name", EVERY_MODE)
def test_doctor_exits_zero_and_names_the_problem(outcomes, name):
    result, path = outcomes[(name, "doctor")]
    no_traceback(result)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if str(path) in line]
    assert lines, result.stdout
    expected = f"FI_PATCHES_PINS is invalid: {path}: {BAD_FILES[name][1]}"
    assert all(expected in line for line in lines), lines


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_pins_check_exits_one_with_one_line(outcomes, name):
    result, path = outcomes[(name, "check")]
    no_traceback(result)
    assert result.returncode == 1
    output = (result.stdout + result.stderr).strip().splitlines()
    assert len(output) == 1, output
    assert output[0].startswith(f"pins check: invalid pin table: {path}: {BAD_FILES[name][1]}")


@pytest.mark.parametrize("name", EVERY_MODE)
def test_auto_leaves_flashinfer_stock_after_one_error_line(outcomes, name):
    result, path = outcomes[(name, "auto")]
    no_traceback(result)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    if report["stock"] is not None:
        assert report["offered"] == report["stock"] and len(report["stock"]) > 1
    assert report["outcome"].startswith("left FlashInfer stock: ")
    errors = [line for line in result.stderr.splitlines() if str(path) in line]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "left FlashInfer stock" in errors[0] and BAD_FILES[name][1] in errors[0]
