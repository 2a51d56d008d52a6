"""Compiled self-check outcomes kept on disk (``fi_patches.compat.selfcheck_cache``): a second
process reuses them, a corrupt file is rebuilt, a changed key (another device, an edited
FlashInfer source file) misses, ``doctor --fresh`` bypasses the cache, and the cheap self-checks
run in every process, so a FlashInfer patched in memory is judged as it is even with the cache
warm. Each process is a real ``python -m fi_patches -v doctor --json`` with the real FlashInfer
targeting sm_103 offline; what it did is read from its log and from the cache files."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

import fi_patches.compat.features
from fi_patches.compat import selfcheck_cache
from fi_patches.internals import flashinfer as fi
from fi_patches.internals.cute_dsl import CUTE_DSL
from tests.conftest import require_release_supports
from tests.forkserver import ForkServer

RUN_HERE = {fi.FLASHINFER, CUTE_DSL}
"""The packages of the features judged here (the vLLM and SGLang ones stop earlier)."""

FEATURES = tuple(
    f.name
    for f in fi_patches.compat.features.FEATURES
    if set(f.requires) <= RUN_HERE and f.compiled_check
)
"""The features with a compiled (cached) check that runs here (the vLLM ones stop earlier)."""
ON_DEVICE = tuple(
    f.name for f in fi_patches.compat.features.FEATURES if f.name in FEATURES and f.devices
)
"""The cached features judged for a device (the others need none: their key holds no arch)."""
CHEAP = tuple(
    f.name
    for f in fi_patches.compat.features.FEATURES
    if set(f.requires) <= RUN_HERE and not f.compiled_check
)
"""The features whose only self-check is cheap: it runs in every process, never kept."""
COMPILED = "compiled wide kernel tile 16"  # fi_patches.wide.kernel's log line: a real compile


def doctor(
    server: ForkServer,
    cache: Path,
    *args: str,
    device: str = "sm_103",
    before: str = "",
    path: str = "",
) -> tuple[dict, str]:
    """doctor in a fresh process (a fork of the fork server, which imported torch alone);
    ``before`` is code a consumer runs first (in that process), ``path`` goes first on
    ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.update(FI_PATCHES_DEVICE=device, FI_PATCHES_CACHE_DIR=str(cache))
    if path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
    main = "import sys, fi_patches.cli; raise SystemExit(fi_patches.cli.main(sys.argv[1:]))"
    command = ["-c", f"{before}\n{main}", "-v", "doctor", "--json", *args]
    result = server.run(command, env, os.getcwd(), timeout=600)
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
def cold(tmp_path_factory, forkserver) -> tuple[Path, dict, str]:
    """A cache written by one cold process: (its directory, its records, its log). Skips where
    a feature stops before its self-check on this FlashInfer (the compat matrix's cells)."""
    for feature in FEATURES:
        require_release_supports(feature)
    cache = tmp_path_factory.mktemp("cold")
    records, log = doctor(forkserver, cache)
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


def test_a_second_process_reuses_every_outcome(cold, warm, forkserver):
    before = {name: path.stat().st_mtime_ns for name, path in files(warm).items()}
    records, log = doctor(forkserver, warm)
    assert reused(log) == set(FEATURES) and stored(log) == set()
    assert COMPILED not in log  # the wide self-check did not compile its kernel again
    assert records == cold[1]  # the same verdicts and reasons
    assert {name: path.stat().st_mtime_ns for name, path in files(warm).items()} == before


def test_a_corrupt_file_is_rebuilt(cold, warm, forkserver):
    broken = files(warm)["wide_tile"]
    broken.write_text('{"key": {"feature": "wide_ti')  # as a killed writer might leave it
    records, log = doctor(forkserver, warm)
    assert f"self-check cache {broken} is unreadable" in log
    assert stored(log) == {"wide_tile"}
    assert COMPILED in log
    assert records == cold[1]
    assert json.loads(broken.read_text())["passed"] is records["wide_tile"][0]


def test_a_file_of_another_key_is_not_trusted(tmp_path, monkeypatch, caplog):
    from fi_patches.compat.target import Device

    monkeypatch.setenv(selfcheck_cache.ENV, str(tmp_path))
    device = Device("sm_103", "env", "FI_PATCHES_DEVICE=sm_103")
    entry = selfcheck_cache.key("wide_tile", "m:f", device, (), ("flashinfer",))
    path = selfcheck_cache.path_for(entry)
    entry["versions"]["torch"] = "0.0.0"  # as if written under another torch at this path
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"key": entry, "passed": False, "outcome": "another torch"}))
    with caplog.at_level(logging.INFO, logger="fi_patches"):
        outcome = selfcheck_cache.outcome(
            "wide_tile", "m:f", device, (), lambda: None, ("flashinfer",)
        )
    assert outcome is None
    assert f"self-check cache {path} does not match this key" in caplog.text
    assert json.loads(path.read_text())["key"]["versions"]["torch"] != "0.0.0"


def test_another_device_is_another_key(cold, warm, forkserver):
    before = files(warm)
    _, log = doctor(forkserver, warm, device="sm_100")
    assert reused(log) == set(FEATURES) - set(ON_DEVICE) and stored(log) == set(ON_DEVICE)
    after = sorted((warm / "selfcheck").glob("*.json"))
    assert len(after) == len(FEATURES) + len(ON_DEVICE)
    assert all(path in after for path in before.values())
    assert all(
        json.loads(p.read_text())["key"]["device"]["arch"] == "sm_100"
        for p in after
        if p not in before.values()
    )


def test_doctor_fresh_runs_every_self_check_again_and_rewrites_the_cache(cold, warm, forkserver):
    records, log = doctor(forkserver, warm, "--fresh")
    assert reused(log) == set() and stored(log) == set(FEATURES)
    assert COMPILED in log
    assert records == cold[1]
    assert set(files(warm)) == set(FEATURES)


def test_off_keeps_nothing_and_an_unwritable_place_warns_once(tmp_path, monkeypatch, caplog):
    from fi_patches.compat.target import Device

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
    from fi_patches.compat.features import ProbeResult
    from fi_patches.compat.target import Device

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


BREAK_RUNNER = """
import flashinfer.gemm.gemm_base as gemm_base
from fi_patches.internals import flashinfer as fi
from fi_patches.internals.cute_dsl import CUTE_DSL

factory = getattr(gemm_base, fi.LOW_LATENCY_RUNNER.attr)
runner_class = type(factory(103, True))


def get_valid_tactics(self, inputs, profile):
    {body}


runner_class.get_valid_tactics = get_valid_tactics
"""
"""What a consumer might do to FlashInfer in memory before fi_patches looks: its low-latency
runner's ``get_valid_tactics`` raises or returns None (the factory's class is one per process
from 0.7.4 on, where ``lru_cache`` holds it)."""


@pytest.mark.parametrize("body", ["return None", "raise RuntimeError('patched by a consumer')"])
def test_a_flashinfer_patched_in_memory_is_judged_here_with_the_cache_warm(
    cold, warm, body, forkserver
):
    assert cold[1]["pinned_tactics"][0]  # the earlier process found it healthy
    if type(fi.low_latency_runner(103, True)) is not type(fi.low_latency_runner(103, True)):
        pytest.skip("this FlashInfer builds its low-latency runner class per call")
    records, log = doctor(forkserver, warm, before=BREAK_RUNNER.format(body=body))
    assert reused(log) == set(FEATURES)  # the cache is on and warm
    enabled, reason = records["pinned_tactics"]
    assert not enabled
    assert reason.startswith("self-check failed on FlashInfer "), reason
    assert ("RuntimeError: patched by a consumer" in reason) or ("NoneType" in reason), reason
    assert records["wide_tile"] == cold[1]["wide_tile"]  # not what the runner patch touches


def _copy_of_flashinfer(root: Path) -> Path:
    """A site dir holding a copy of the installed FlashInfer's Python sources (its other files
    linked), to edit as a patched or editable install would be."""
    import flashinfer

    source = Path(flashinfer.__file__).parent
    site = root / "site"

    def copy(src: str, dst: str) -> None:
        if src.endswith(".py"):
            shutil.copy2(src, dst)
        else:
            os.symlink(src, dst)

    shutil.copytree(source, site / "flashinfer", copy_function=copy)
    return site


def test_an_edited_flashinfer_source_file_is_checked_again(tmp_path, forkserver):
    for feature in FEATURES:
        require_release_supports(feature)
    site = _copy_of_flashinfer(tmp_path)
    cache = tmp_path / "cache"
    _, log = doctor(forkserver, cache, path=str(site))
    assert stored(log) == set(FEATURES) and COMPILED in log
    module = fi.LOW_LATENCY_KERNEL.module
    edited = site / Path(*module.split(".")).with_suffix(".py")
    data = json.loads(files(cache)["wide_tile"].read_text())
    assert data["key"]["sources"][module].startswith(f"{edited}:")
    edited.write_text(edited.read_text() + "\n# patched in place, same version\n")
    _, again = doctor(forkserver, cache, path=str(site))
    assert stored(again) == set(FEATURES) and reused(again) == set()
    assert COMPILED in again
    _, third = doctor(forkserver, cache, path=str(site))
    assert reused(third) == set(FEATURES) and COMPILED not in third
