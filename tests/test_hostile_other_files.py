"""Every other file a user hands fi_patches gets the pin files' treatment: a CHAIN.toml
(``tune``, ``validate``), recorded timings (``tune --timings``) and a tuner cache (``pins
record``) that are not UTF-8, nest too deeply, hold an integer too long to convert, are binary
garbage or are not regular files are refused with one line naming the file, never a
traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fi_patches.cli import main
from tests.chain_helpers import CHAIN
from tests.conftest import flashinfer_or_skip

HOSTILE: dict[str, bytes] = {
    "latin1": '[chain]\nname = "caf\xe9"\n'.encode("latin-1"),
    "deep": b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "huge_int": b'{"format": ' + b"9" * 5000 + b"}",
    "garbage": bytes(range(256)) * 4,
}
"""Bodies that break a naive reader, each in a file whose suffix the command accepts."""

ROOT = Path(__file__).resolve().parent.parent

DEEP_TOML = b"a = " + b"[" * 50_000 + b"]" * 50_000 + b"\n"
HUGE_TOML = b"[chain]\nrepeats = " + b"9" * 5000 + b"\n"


def _write(path: Path, body: bytes) -> Path:
    path.write_bytes(body)
    return path


def _one_line_naming(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if str(path) in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("name", "body", "reason"),
    [
        ("latin1", HOSTILE["latin1"], "file: is not UTF-8 text (byte 0xe9 at line 2"),
        ("deep", DEEP_TOML, "TOML: nests too deeply to read"),
        ("huge_int", HUGE_TOML, "TOML: holds a value too long to read"),
        ("garbage", HOSTILE["garbage"], "file: is not UTF-8 text"),
    ],
)
@pytest.mark.parametrize("command", ["tune", "validate"])
def test_a_hostile_chain_file_is_one_line(tmp_path, capsys, name, body, reason, command):
    chain = _write(tmp_path / f"{name}.toml", body)
    args = ["--out", str(tmp_path / "p.toml")] if command == "tune" else []
    code = main([command, "--chain", str(chain), *args])
    line = _one_line_naming(capsys, chain)
    assert code == 1
    assert f"{chain}: {reason}" in line


def test_a_chain_file_that_is_no_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "chain.toml"
    os.mkfifo(fifo)  # opening it must not wait for a writer: a child, so a hang is bounded
    result = subprocess.run(
        [sys.executable, "-m", "fi_patches", "tune", "--chain", str(fifo), "--out", "p.toml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == f"tune: invalid chain:\n  {fifo}: file: is not a regular file"


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_recorded_timings_are_one_line(tmp_path, capsys, name):
    flashinfer_or_skip()  # without it, tune stops before it reads the timings
    chain = _write(tmp_path / "chain.toml", CHAIN.encode())
    timings = _write(tmp_path / f"{name}.json", HOSTILE[name])
    out = tmp_path / "p.toml"
    code = main(["tune", "--chain", str(chain), "--out", str(out), "--timings", str(timings)])
    line = _one_line_naming(capsys, timings)
    assert code == 1 and not out.exists()
    assert line.startswith(f"tune: {timings}: ")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("latin1", ": file: is not UTF-8 text"),
        ("deep", ": JSON: nests too deeply to read"),
        ("huge_int", " holds no tuned entry"),  # read (the integer kept as too long): no entry
        ("garbage", ": file: is not UTF-8 text"),
    ],
)
def test_a_hostile_tuner_cache_is_one_line(pinning, tmp_path, capsys, name, reason):
    cache = _write(tmp_path / f"{name}.json", HOSTILE[name])
    out = tmp_path / "pins.toml"
    code = main(["pins", "record", "--device", "sm_103", "--from", str(cache), "--out", str(out)])
    line = _one_line_naming(capsys, cache)
    assert code == 1 and not out.exists()
    assert f"{cache}{reason}" in line


def test_hostile_entries_of_a_v2_store_are_skipped(pinning, tmp_path, capsys):
    entries = tmp_path / "store" / "entries"
    entries.mkdir(parents=True)
    for name, body in HOSTILE.items():
        _write(entries / f"{name}.json", body)
    _write(entries.parent / "manifest.json", json.dumps([1, 2]).encode())  # not an object
    out = tmp_path / "pins.toml"
    code = main(["pins", "record", "--device", "sm_103", "--from", str(entries.parent)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # Nothing readable in it: the same answer as an empty store.
    assert code == 1 and "holds no tuned entry" in err and not out.exists()
