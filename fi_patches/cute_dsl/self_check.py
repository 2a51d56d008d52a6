"""The ``pinned_cute_dsl`` self-check: the real cute-dsl runner takes a pin once patched."""

from __future__ import annotations

from fi_patches.compat.device import Device
from fi_patches.cute_dsl.runner import cute_dsl_runner
from fi_patches.pinning.probe_inputs import mxfp8_runner_inputs
from fi_patches.pinning.self_check import offers_exactly_the_pin


def self_check(device: Device) -> str | None:
    import torch

    sm = device.sm_version or 0
    runner = cute_dsl_runner(sm // 10, sm % 10, torch.bfloat16)
    n, k, rows = 512, 1024, 64
    try:
        return offers_exactly_the_pin(
            runner, mxfp8_runner_inputs(n, k, rows), "cute_dsl", n, k, rows, "pinned_cute_dsl"
        )
    except Exception as exc:
        if not torch.cuda.is_available():
            return (
                "FlashInfer's cute-dsl runner reads the CUDA device's SM count to list its "
                f"tactics, so it cannot be checked without the device ({type(exc).__name__})"
            )
        raise
