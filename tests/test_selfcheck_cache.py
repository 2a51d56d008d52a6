"""Self-check outcomes kept on disk (``fi_patches.compat.selfcheck_cache``): a second process
reuses them, a corrupt file is rebuilt, a changed key misses, ``doctor --fresh`` bypasses the
cache. Each process is a real ``python -m fi_patches -v doctor --json`` with the real FlashInfer
targeting sm_103 offline; what it did is read from its log and from the cache files."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fi_patches.features
from fi_patches.compat import selfcheck_cache
from fi_patches.internals import flashinfer as fi
from tests.conftest import require_release_supports

FEATURES = tuple(f.name for f in fi_patches.features.FEATURES if f.requires == (fi.FLASHINFER,))
"""The features whose self-checks run here (the vLLM ones stop earlier, without vLLM)."""
ON_DEVICE = tuple(
    f.name for f in fi_patches.features.FEATURES if f.requires == (fi.FLASHINFER,) and f.devices
)
"""The features judged for a device (the others need none: their key holds no arch)."""
COMPILED = "compiled wide kernel tile 16"  # fi_patches.wide.compile's log line: a real compile


def doctor(cache: Path, *args: str, device: str = "sm_103") -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.update(FI_PATCHES_DEVICE=device, FI_PATCHES_CACHE_DIR=str(cache))
    result = subprocess.run(
        [sys.executable, "-m", "fi_patches", "-v", "doctor", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = {r["name"]: (r["enabled"], r["reason"]) for r in json.loads(result.stdout)}
    return records, result.stderr


def files(cache: Path) -> dict[str, Path]:
    found = sorted((cache / "selfcheck").glob("*.json"))
    return {p.name.rsplit("-", 1)[0]: p for p in found}


def reused(log: str) -> set[str]:
    return {f for f in FEATURES if f"feature {f}: self-check outcome reused from" in log}


def stored(log: str) -> set[str]:
    return {f for f in FEATURES if f"feature {f}: self-check outcome stored in" in log}


@pytest.fixture(scope="module")
def cold(tmp_path_factory) -> tuple[Path, dict, str]:
    """A cache written by one cold process: (its directory, its records, its log). Skips where
    a feature stops before its self-check on this FlashInfer (the compat matrix's cells)."""
    for feature in FEATURES:
        require_release_supports(feature)
    cache = tmp_path_factory.mktemp("cold")
    records, log = doctor(cache)
    return cache, records, log


@pytest.fixture
def warm(cold, tmp_path) -> Path:
    """A copy of the cold process's cache, for one test to change."""
    copy = tmp_path / "cache"
    shutil.copytree(cold[0], copy)
    return copy


def test_a_cold_process_runs_each_self_check_and_stores_its_outcome(cold):
    cache, records, log = cold
    assert stored(log) == set(FEATURES) and reused(log) == set()
    assert COMPILED in log
    written = files(cache)
    assert set(written) == set(FEATURES)
    for name, path in written.items():
        data = json.loads(path.read_text())
        assert data["key"]["feature"] == name
        assert data["key"]["device"]["arch"] == ("sm_103" if name in ON_DEVICE else None)
        assert set(data["key"]["versions"]) == set(selfcheck_cache.DISTRIBUTIONS)
        assert {"flashinfer-python", "nvidia-cutlass-dsl", "torch"} <= set(data["key"]["versions"])
        assert data["passed"] is records[name][0]
        assert data["passed"] is (data["outcome"] is None)
        if not data["passed"]:
            assert data["outcome"] in records[name][1]


def test_a_second_process_reuses_every_outcome(cold, warm):
    before = {name: path.stat().st_mtime_ns for name, path in files(warm).items()}
    records, log = doctor(warm)
    assert reused(log) == set(FEATURES) and stored(log) == set()
    assert COMPILED not in log  # the wide self-check did not compile its kernel again
    assert records == cold[1]  # the same verdicts and reasons
    assert {name: path.stat().st_mtime_ns for name, path in files(warm).items()} == before


def test_a_corrupt_file_is_rebuilt_and_a_file_of_another_key_is_not_trusted(cold, warm):
    broken = files(warm)["wide_tile"]
    broken.write_text('{"key": {"feature": "wide_ti')  # as a killed writer might leave it
    foreign = files(warm)["pinned_tactics"]  # as if written under another torch at this path
    data = json.loads(foreign.read_text())
    data["key"]["versions"]["torch"] = "0.0.0"
    data["passed"], data["outcome"] = False, "recorded under another torch"
    foreign.write_text(json.dumps(data))
    records, log = doctor(warm)
    assert f"self-check cache {broken} is unreadable" in log
    assert f"self-check cache {foreign} does not match this key" in log
    assert stored(log) == {"wide_tile", "pinned_tactics"}
    assert reused(log) == set(FEATURES) - {"wide_tile", "pinned_tactics"}
    assert COMPILED in log
    assert records == cold[1]
    assert json.loads(broken.read_text())["passed"] is records["wide_tile"][0]
    assert json.loads(foreign.read_text())["key"]["versions"]["torch"] != "0.0.0"


def test_another_device_is_another_key(cold, warm):
    before = files(warm)
    _, log = doctor(warm, device="sm_100")
    assert reused(log) == set(FEATURES) - set(ON_DEVICE) and stored(log) == set(ON_DEVICE)
    after = sorted((warm / "selfcheck").glob("*.json"))
    assert len(after) == len(FEATURES) + len(ON_DEVICE)
    assert all(path in after for path in before.values())
    assert all(
        json.loads(p.read_text())["key"]["device"]["arch"] == "sm_100"
        for p in after
        if p not in before.values()
    )


def test_doctor_fresh_runs_every_self_check_again_and_rewrites_the_cache(cold, warm):
    records, log = doctor(warm, "--fresh")
    assert reused(log) == set() and stored(log) == set(FEATURES)
    assert COMPILED in log
    assert records == cold[1]
    assert set(files(warm)) == set(FEATURES)


def test_off_keeps_nothing_and_an_unwritable_place_warns_once(tmp_path, monkeypatch, caplog):
    from fi_patches.compat.device import Device

    monkeypatch.setenv(selfcheck_cache.ENV, "off")
    assert selfcheck_cache.cache_dir() is None
    monkeypatch.delenv(selfcheck_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert selfcheck_cache.cache_dir() == tmp_path / "xdg" / "fi_patches" / "selfcheck"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(selfcheck_cache.ENV, str(blocker))  # its selfcheck/ cannot be created
    device = Device("sm_103", "env", "FI_PATCHES_DEVICE=sm_103")
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        for feature in ("wide_tile", "pinned_tactics"):
            assert selfcheck_cache.outcome(feature, "m:f", device, (), lambda: None) is None
    warned = [r for r in caplog.records if "cannot keep self-check outcomes" in r.getMessage()]
    assert len(warned) == 1 and str(blocker / "selfcheck") in warned[0].getMessage()


def test_an_outcome_that_raised_is_not_kept(tmp_path, monkeypatch):
    from fi_patches.compat.device import Device
    from fi_patches.compat.evaluate import ProbeResult

    monkeypatch.setenv(selfcheck_cache.ENV, str(tmp_path))
    device = Device("sm_103", "env", "FI_PATCHES_DEVICE=sm_103")
    probes = (ProbeResult("module flashinfer", None),)

    def raises() -> str | None:
        raise MemoryError("transient")

    with pytest.raises(MemoryError):
        selfcheck_cache.outcome("wide_tile", "m:f", device, probes, raises)
    assert not list(tmp_path.rglob("*.json"))
    assert selfcheck_cache.outcome("wide_tile", "m:f", device, probes, lambda: "no") == "no"
    assert selfcheck_cache.outcome("wide_tile", "m:f", device, probes, lambda: None) == "no"
