"""SGLang's real ``load_plugins()`` in fresh processes: the ``fi_patches`` entry point activates
the default pins, checked on FlashInfer's real low-latency runner; ``SGLANG_PLUGINS`` naming
another plugin, ``FI_PATCHES_SGLANG=0`` or a malformed table leave FlashInfer stock and the
process running. The rank guard runs inside SGLang's own ``_autotune_process_group`` (compiled
from the installed source) before FlashInfer receives the group."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip(
    "sglang.srt.plugins", reason="SGLang is not installed here (`nox -s sglang` runs these tests)"
)

from tests import lowlat
from tests.child_script import run_reporting
from tests.process_group import run_group

N, K = lowlat.SHAPE
ROOT = Path(__file__).resolve().parents[2]
OURS = re.compile(r"^[A-Z]+ fi_patches[.\w]*: ")
"""fi_patches' own log lines (SGLang's loader names the plugin in lines of its own)."""

PROCESS = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
from sglang.srt.plugins import load_plugins
load_plugins()
{again}
import flashinfer
from flashinfer.gemm import gemm_base
import torch
from fi_patches.pinning.installation import installed_count
{offered}print("REPORT " + json.dumps({{
    "pinned": offered(8),
    "unpinned": len(offered(4)),
    "plugin_imported": "fi_patches.sglang.plugin" in sys.modules,
    "installed": installed_count(),
}}))
"""


def pins_file(tmp_path: Path, tactic, name: str = "pins.toml") -> Path:
    path = tmp_path / name
    path.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(tactic)}\n"
    )
    return path


def child_env(tmp_path: Path, **env: str) -> dict[str, str]:
    child = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FI_PATCHES_", "SGLANG_")) and k != "PYTHONPATH"
    }
    # import sglang moves FlashInfer's workspace under SGLANG_CACHE_DIR: keep it in the test's
    child.update(FI_PATCHES_DEVICE="sm_103", SGLANG_CACHE_DIR=str(tmp_path / "sglang"), **env)
    return child


AGAIN = """
load_plugins()  # SGLang calls it from several places; it loads once per process
from fi_patches.sglang.plugin import register
register()  # and a second call of the entry point does nothing
"""


def start(tmp_path: Path, again: bool = False, **env: str) -> tuple[dict, list[str], str]:
    """Run the script as an SGLang process would; its report, fi_patches' log lines and the
    whole log."""
    script = tmp_path / "process.py"
    script.write_text(PROCESS.format(again=AGAIN if again else "", offered=lowlat.offered_source()))
    report, stderr = run_reporting(script, child_env(tmp_path, **env), tmp_path)
    return report, [line for line in stderr.splitlines() if OURS.search(line)], stderr


@pytest.fixture
def pin(pinning) -> tuple[int, ...]:
    return lowlat.non_split_alternative(N, K, 8)


def test_load_plugins_activates_the_pins_once(tmp_path, pin):
    pins = pins_file(tmp_path, pin)
    report, lines, log = start(tmp_path, again=True, FI_PATCHES_PINS=str(pins))
    assert report["pinned"] == [list(pin)]
    assert report["unpinned"] == len(lowlat.stock(N, K, 4))
    assert report["installed"] == 1  # one holder of the wrappers: the process-wide activation
    assert "Executed general plugin: fi_patches" in log  # SGLang's own loader called it
    plugin = [line for line in lines if "fi_patches SGLang plugin:" in line]
    assert plugin == [
        f"INFO fi_patches.sglang.plugin: fi_patches SGLang plugin: active (FI_PATCHES_PINS is "
        f"set): pins from {pins} (1 [[low_latency]] entry), applied when FlashInfer is imported"
    ], lines
    assert any(
        f"fi_patches.auto: pinning the [[low_latency]] entries from {pins}" in line
        for line in lines
    )
    assert not [line for line in lines if line.startswith(("ERROR", "WARNING"))], lines


def test_sglang_plugins_naming_another_plugin_leaves_flashinfer_stock(tmp_path, pin):
    report, lines, log = start(
        tmp_path, FI_PATCHES_PINS=str(pins_file(tmp_path, pin)), SGLANG_PLUGINS="another_plugin"
    )
    assert report["pinned"] == [list(t) for t in lowlat.stock(N, K, 8)]
    assert report["installed"] == 0
    assert "Skipping plugin fi_patches (not in SGLANG_PLUGINS)" in log
    assert report["plugin_imported"] is False
    assert lines == []


def test_sglang_plugins_naming_fi_patches_loads_it(tmp_path, pin):
    report, _, log = start(
        tmp_path, FI_PATCHES_PINS=str(pins_file(tmp_path, pin)), SGLANG_PLUGINS="other,fi_patches"
    )
    assert report["pinned"] == [list(pin)]
    assert "Executed general plugin: fi_patches" in log


def test_fi_patches_sglang_0_keeps_the_plugin_off(tmp_path, pin):
    report, lines, _ = start(
        tmp_path, FI_PATCHES_SGLANG="0", FI_PATCHES_PINS=str(pins_file(tmp_path, pin))
    )
    assert report["pinned"] == [list(t) for t in lowlat.stock(N, K, 8)]
    assert report["installed"] == 0
    assert report["plugin_imported"] is True  # SGLang loaded it; it chose to do nothing
    assert lines == []  # its one line is DEBUG


def test_a_malformed_table_leaves_the_process_running_and_flashinfer_stock(tmp_path, pinning):
    path = tmp_path / "pins.toml"
    path.write_text("[meta\n")
    report, lines, log = start(tmp_path, FI_PATCHES_PINS=str(path))
    assert report["pinned"] == [list(t) for t in lowlat.stock(N, K, 8)]
    assert report["installed"] == 0
    assert len(lines) == 1, lines
    assert re.match(
        r"ERROR fi_patches\.sglang\.plugin: fi_patches SGLang plugin: left SGLang and FlashInfer "
        rf"stock because of its pins: {re.escape(str(path))}: .*TOML",
        lines[0],
    ), lines[0]
    assert "Executed general plugin: fi_patches" in log  # no exception reached SGLang


def test_doctor_lists_sglang(sm103, capsys, monkeypatch):
    from fi_patches.cli import main

    monkeypatch.setenv("FI_PATCHES_SGLANG", "1")
    assert main(["doctor", "--json"]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    plugin = records["sglang_plugin"]
    assert plugin["enabled"], plugin["reason"]
    assert plugin["reason"] == "SGLang 0.5.23 is verified; 5 probes and the self-check pass."
    assert plugin["device"] == "any" and all(p["ok"] for p in plugin["probes"])
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^sglang_plugin +enabled +- +- +yes +any +SGLang 0\.5\.23 is verified", out, re.M
    )
    assert (
        "SGLang plugin: SGLang 0.5.23; entry point fi_patches registered in sglang.srt.plugins; "
        "it would activate (FI_PATCHES_SGLANG=1)." in out
    )


GUARDED = """
from fi_patches.ranks.guard import RankMismatchError
from sglang.srt.plugins import load_plugins
load_plugins()
import flashinfer  # fi_patches applies the pins and arms its guard here
from flashinfer.autotuner import get_autotune_process_group
from tests.sglang.site import function
site = function("_autotune_process_group")  # SGLang's own context manager
try:
    with site(dist.group.WORLD):
        report({"entered": get_autotune_process_group() is dist.group.WORLD})
except RankMismatchError as exc:
    report({"mismatch": str(exc), "group_set": get_autotune_process_group() is not None})
"""


@pytest.mark.parametrize("same", [True, False], ids=["same-pins", "other-pins"])
def test_the_guard_runs_inside_sglangs_tuning_site(tmp_path, pin, same):
    pins = [pins_file(tmp_path, pin, "a.toml")] * 2
    if not same:
        other = next(t for t in lowlat.stock(N, K, 8) if tuple(t) != tuple(pin))
        pins[1] = pins_file(tmp_path, other, "b.toml")

    def env(rank: int) -> dict[str, str]:
        return {
            "FI_PATCHES_PINS": str(pins[rank]),
            "SGLANG_CACHE_DIR": str(tmp_path / "sglang"),
            "PYTHONPATH": str(ROOT),
        }

    outcomes = run_group(GUARDED, 2, tmp_path, limit=300, env=env)
    results = [o.result for o in outcomes]
    if same:
        assert results == [{"entered": True}] * 2
        return
    for result in results:
        assert "the 2 ranks of process group" in result["mismatch"], result
        assert "pins" in result["mismatch"]
        assert result["group_set"] is False  # FlashInfer never received the group
