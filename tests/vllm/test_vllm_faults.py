"""FAULT INJECTION on the real installed vLLM: a test-only ``sitecustomize`` edits vLLM's kernel
module right after vLLM imports it (as a vLLM release might have it), in a fresh process where the
plugin runs with routing asked for. ``vllm_route`` is then disabled with the reason, the route
is not installed, and vLLM's own method still issues its own GEMM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (`nox -s vllm` runs these tests)")

ROOT = Path(__file__).resolve().parents[2]
KERNEL_MODULE = "vllm.model_executor.kernels.linear.mxfp8.flashinfer"

SITECUSTOMIZE = """
from fi_patches import startup  # runs hooks in registration order: this one first

def fault(module):
    cls = module.FlashInferCutedslMxfp8LinearKernel
    original = vars(cls)["apply_weights"]
{fault}

startup.when_imported({module!r}, fault)
"""

FAULTS = {
    # vLLM renames the method, in the kernel and its base class alike (so vLLM still works).
    "apply_weights_renamed": (
        "apply_mxfp8",
        """
    base = module.Mxfp8LinearKernel
    for c in (base, cls):
        setattr(c, "apply_mxfp8", vars(c)["apply_weights"])
        delattr(c, "apply_weights")
    base.__abstractmethods__ = (base.__abstractmethods__ - {"apply_weights"}) | {"apply_mxfp8"}
    cls.__abstractmethods__ = frozenset()
""",
        "vLLM 0.34.0 lacks an internal it needs: "
        f"{KERNEL_MODULE}.FlashInferCutedslMxfp8LinearKernel.apply_weights is missing "
        "(AttributeError",
    ),
    # vLLM renames a parameter.
    "apply_weights_signature": (
        "apply_weights",
        """
    def apply_weights(self, layer, input_, bias=None):
        return original(self, layer, input_, bias)
    cls.apply_weights = apply_weights
""",
        "FlashInferCutedslMxfp8LinearKernel.apply_weights changed signature: expected "
        "(layer, x, bias, ...), found (layer, input_, bias)",
    ),
    # vLLM moves the GEMM out of apply_weights (same signature, another body).
    "gemm_moved": (
        "apply_weights",
        """
    def apply_weights(self, layer, x, bias=None):
        return original(self, layer, x, bias)
    cls.apply_weights = apply_weights
""",
        "FlashInferCutedslMxfp8LinearKernel.apply_weights no longer calls "
        "mm_mxfp8(backend='cute-dsl')",
    ),
}

SERVER = """
import json, logging, pytest, torch
from vllm.plugins import load_general_plugins
load_general_plugins()
import fi_patches
from fi_patches.vllm import plugin, route
from tests.vllm import layers
from tests.vllm.calls import recording
linear = layers.linear(pytest.MonkeyPatch())  # vLLM imports its kernel: the fault, then the route
method = vars(layers.kernel_class())[{method!r}]
error = None
with recording() as seen:
    try:
        getattr(linear.kernel, {method!r})(linear.layer, torch.zeros(4, layers.K, dtype=torch.bfloat16))
    except Exception as exc:
        error = f"{{type(exc).__name__}}: {{exc}}"
records = {{r.name: r.to_dict() for r in fi_patches.status()}}
print("REPORT " + json.dumps({{
    "plugin": plugin.outcome(),
    "route": route.outcome(),
    "method_module": method.__module__,
    "seen": seen,
    "error": error,
    "vllm_route": records["vllm_route"],
    "vllm_plugin": records["vllm_plugin"],
}}))
"""


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_changed_vllm_disables_the_route_and_keeps_working(tmp_path, fault):
    method, body, reason = FAULTS[fault]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        textwrap.dedent(SITECUSTOMIZE).format(fault=body.rstrip(), module=KERNEL_MODULE)
    )
    script = tmp_path / "server.py"
    script.write_text(SERVER.format(method=method))
    child = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FI_PATCHES_", "VLLM_")) and k != "PYTHONPATH"
    }
    child.update(
        FI_PATCHES_DEVICE="sm_103",
        FI_PATCHES_VLLM="1",
        FI_PATCHES_VLLM_ROUTE="1",
        PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]),
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=child,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    assert "Traceback" not in result.stderr, result.stderr[-5000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line[len("REPORT ") :])
    # doctor's verdict: disabled, with the reason; the plugin itself is fine
    assert not report["vllm_route"]["enabled"]
    assert reason in report["vllm_route"]["reason"], report["vllm_route"]["reason"]
    assert report["vllm_plugin"]["enabled"], report["vllm_plugin"]["reason"]
    # the route stayed off and said why, once, as a warning
    assert report["route"].startswith("routing off: ") and reason in report["route"]
    warnings = [x for x in result.stderr.splitlines() if "fi_patches vLLM plugin: routing off" in x]
    assert len(warnings) == 1, result.stderr[-5000:]
    # vLLM keeps working: its own method, its own GEMM
    assert report["method_module"] != "fi_patches.vllm.route"
    assert report["seen"] == ["vllm mxfp8_e4m3_quantize", "vllm mm_mxfp8(backend='cute-dsl')"]
    assert "cuda" in report["error"].lower()  # FlashInfer finds no CUDA device on this CPU
