"""vLLM's real ``load_general_plugins()`` in fresh processes: the ``fi_patches`` entry point
activates the default pins (and, asked to, the route) once, whatever calls it how often;
``VLLM_PLUGINS`` naming another plugin, no opt-in, or bad pins leave vLLM and FlashInfer stock.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (`nox -s vllm` runs these tests)")

from tests import lowlat
from tests.child_script import run_reporting

N, K = lowlat.SHAPE
ROOT = Path(__file__).resolve().parents[2]
OURS = re.compile(r"\[(plugin|route|activation|pins|context|gemm)\.py:\d+\]|fi_patches")

SERVER = """
import json, sys
# As vLLM's engine does before it starts its processes:
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging
configure_logging(LoggingConfig())
from vllm.plugins import load_general_plugins
load_general_plugins()
{again}
import vllm.model_executor.kernels.linear  # as vLLM imports its kernels (the route's hook)
from vllm.model_executor.kernels.linear.mxfp8 import flashinfer as kernels
import flashinfer
from flashinfer.gemm import gemm_base
import torch
from fi_patches.pinning.installation import installed_count
{offered}apply = vars(kernels.FlashInferCutedslMxfp8LinearKernel)["apply_weights"]
print("REPORT " + json.dumps({{
    "pinned": offered(8),
    "unpinned": len(offered(4)),
    "apply_weights": apply.__module__,
    "plugin_imported": "fi_patches.vllm.plugin" in sys.modules,
    "installed": installed_count(),
}}))
"""

AGAIN = """
load_general_plugins()  # vLLM guards a process against a second load ...
import vllm.plugins
vllm.plugins.plugins_loaded = False  # ... so force one, as a process that reloads would
load_general_plugins()
from fi_patches.vllm.plugin import register
register()
"""


def pins_file(tmp_path: Path, tactic) -> Path:
    path = tmp_path / "pins.toml"
    path.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(tactic)}\n"
    )
    return path


def serve(tmp_path: Path, again: bool = False, **env: str) -> tuple[dict, list[str]]:
    """Run the script as a vLLM process would (a fresh interpreter, vLLM's logging on
    stderr); its report and fi_patches' log lines."""
    script = tmp_path / "server.py"
    script.write_text(SERVER.format(again=AGAIN if again else "", offered=lowlat.offered_source()))
    child = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FI_PATCHES_", "VLLM_")) and k != "PYTHONPATH"
    }
    child.update(FI_PATCHES_DEVICE="sm_103", VLLM_LOGGING_STREAM="ext://sys.stderr", **env)
    report, stderr = run_reporting(script, child, tmp_path)
    return report, [line for line in stderr.splitlines() if OURS.search(line)]


@pytest.fixture
def pin(pinning) -> tuple[int, ...]:
    return lowlat.non_split_alternative(N, K, 8)


def test_load_general_plugins_activates_the_pins_once_however_often_it_runs(tmp_path, pin):
    pins = pins_file(tmp_path, pin)
    report, lines = serve(
        tmp_path, again=True, FI_PATCHES_PINS=str(pins), FI_PATCHES_VLLM_ROUTE="1"
    )
    assert report["pinned"] == [list(pin)]
    assert report["unpinned"] == len(lowlat.stock(N, K, 4))
    assert report["apply_weights"] == "fi_patches.vllm.route"
    assert report["installed"] == 1  # the one hold of fi_patches.auto on the engine's wrappers
    plugin = [line for line in lines if "fi_patches vLLM plugin:" in line]
    assert len(plugin) == 1, lines
    # vLLM's own log format: (process pid=...) LEVEL date [file:line] message
    assert re.search(
        r"^\(MainProcess pid=\d+\) INFO \d\d-\d\d [\d:]+ \[plugin\.py:\d+\] fi_patches vLLM "
        rf"plugin: active \(FI_PATCHES_PINS is set\): pins from {re.escape(str(pins))} "
        r"\(1 \[\[low_latency\]\] entry\), applied when FlashInfer is imported; routing armed",
        plugin[0],
    ), plugin[0]
    assert any(
        f"fi_patches.auto: pinning the [[low_latency]] entries from {pins}" in line
        for line in lines
    )
    assert not [line for line in lines if " ERROR " in line or " WARNING " in line], lines


def test_vllm_plugins_naming_another_plugin_keeps_vllm_stock(tmp_path, pin):
    report, lines = serve(
        tmp_path,
        FI_PATCHES_PINS=str(pins_file(tmp_path, pin)),
        FI_PATCHES_VLLM_ROUTE="1",
        VLLM_PLUGINS="another_plugin",
    )
    assert report["pinned"] == [list(t) for t in lowlat.stock(N, K, 8)]
    assert report["apply_weights"] == "vllm.model_executor.kernels.linear.mxfp8.flashinfer"
    assert report["plugin_imported"] is False
    assert report["installed"] == 0
    assert lines == []


def test_fi_patches_vllm_0_keeps_the_plugin_off_whatever_else_is_set(tmp_path, pin):
    report, lines = serve(
        tmp_path,
        FI_PATCHES_VLLM="0",
        FI_PATCHES_VLLM_ROUTE="1",
        FI_PATCHES_PINS=str(pins_file(tmp_path, pin)),
    )
    assert report["pinned"] == [list(t) for t in lowlat.stock(N, K, 8)]
    assert report["apply_weights"] == "vllm.model_executor.kernels.linear.mxfp8.flashinfer"
    assert report["installed"] == 0
    assert lines == []  # its one line is DEBUG


def test_bad_pins_leave_vllm_and_flashinfer_stock_with_one_error_line(tmp_path, pinning):
    path = tmp_path / "pins.toml"
    path.write_text("[meta\n")
    report, lines = serve(tmp_path, FI_PATCHES_PINS=str(path), FI_PATCHES_VLLM_ROUTE="1")
    assert report["pinned"] == [list(t) for t in lowlat.stock(N, K, 8)]
    assert report["apply_weights"] == "vllm.model_executor.kernels.linear.mxfp8.flashinfer"
    assert report["installed"] == 0
    assert len(lines) == 1, lines
    assert re.search(
        r"\) ERROR .* fi_patches vLLM plugin: left vLLM and FlashInfer stock because of its "
        rf"pins: {re.escape(str(path))}: .*TOML",
        lines[0],
    ), lines[0]


def test_doctor_lists_the_vllm_features(sm103, capsys):
    from fi_patches.cli import main

    assert main(["doctor", "--json"]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    plugin, route = records["vllm_plugin"], records["vllm_route"]
    assert plugin["enabled"] and route["enabled"], (plugin["reason"], route["reason"])
    assert plugin["reason"] == "vLLM 0.34.0 is verified; 3 probes and the self-check pass."
    assert route["reason"] == (
        "vLLM 0.34.0 and FlashInfer 0.7.4 are verified; 9 probes and the self-check pass."
    )
    assert (plugin["device"], route["device"]) == ("any", "sm_103")
    assert route["verified"].endswith("; vllm==0.34.0")
    assert all(p["ok"] for p in route["probes"])
    assert main(["doctor"]) == 0
    table = capsys.readouterr().out
    # columns: feature, state, flashinfer, cute dsl, in matrix, device, reason
    assert re.search(
        r"^vllm_plugin +enabled +- +- +yes +any +vLLM 0\.34\.0 is verified", table, re.M
    )
    assert re.search(
        r"^vllm_route +enabled +0\.7\.4 +- +yes +sm_103 +vLLM 0\.34\.0 and", table, re.M
    )
