"""The ``pinned_tactics`` self-check: the real low-latency runner for the device offers exactly
a pinned tactic once patched, and its stock list otherwise."""

from __future__ import annotations

import importlib
from typing import Any

from fi_patches.compat.device import Device
from fi_patches.pinning import stack
from fi_patches.pinning.installation import installation
from fi_patches.pinning.probe_inputs import mxfp8_runner_inputs
from fi_patches.pinning.targets import LOW_LATENCY, LOW_LATENCY_FACTORY


def offers_exactly_the_pin(
    runner: Any, inputs: list[Any], section: str, n: int, k: int, rows: int, feature: str
) -> str | None:
    """With the wrappers of ``feature`` installed, ``runner`` offers its stock list, then only
    a pinned tactic of it, then its stock list again; else the reason it does not."""
    from fi_patches.pins.table import PinTable

    held = installation(feature)
    held.acquire()
    try:
        with stack.isolated():
            stock = [
                tuple(t) if isinstance(t, list) else t
                for t in runner.get_valid_tactics(inputs, None)
            ]
        if not stock:
            return (
                f"FlashInfer's runner offers no tactics for an MXFP8 {n}x{k} problem at {rows} rows"
            )
        pin = stock[-1]
        entry = {"n": n, "k": k, "min_rows": 1, "max_rows": rows, "tactic": _as_toml(pin)}
        table = PinTable.from_mapping(
            {"meta": {"device": "*", "flashinfer": ""}, section: [entry]}, source="<self-check>"
        )
        with stack.isolated(table):
            pinned = list(runner.get_valid_tactics(inputs, None))
        if pinned != [pin]:
            return (
                f"with {pin} pinned the real runner offered {len(pinned)} tactics, so the patch "
                "does not reach it"
            )
        with stack.isolated():
            again = list(runner.get_valid_tactics(inputs, None))
        if again != stock:
            return "the runner's stock tactics changed after a pinned call"
    finally:
        held.release()
    return None


def _as_toml(tactic: Any) -> Any:
    if isinstance(tactic, tuple):
        return [_as_toml(part) for part in tactic]
    return tactic


def self_check(device: Device) -> str | None:
    """``pinned_tactics``: the low-latency runner of ``device`` takes the pin."""
    gemm_base = importlib.import_module(LOW_LATENCY.module)
    runner = getattr(gemm_base, LOW_LATENCY_FACTORY)(device.sm_version, True)
    n, k, rows = 512, 1024, 8
    return offers_exactly_the_pin(
        runner, mxfp8_runner_inputs(n, k, rows), "low_latency", n, k, rows, "pinned_tactics"
    )
