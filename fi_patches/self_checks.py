"""Each feature's behavioural self-check, run once per process after its probes pass: the
patched FlashInfer must behave as the feature needs on the target device, else the feature is
off with the reason (see :mod:`fi_patches.features`). All are cheap and never cached, except
:func:`wide_tile_compiled`, which compiles a kernel and whose outcome is kept on disk."""

from __future__ import annotations

from typing import Any

from fi_patches.compat.target import Device
from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import as_tactic, tactic_json

_SMALL = (512, 1024)
"""``(n, k)`` of the problems the tuner self-checks pin."""


def offers_exactly_the_pin(
    runner: Any, inputs: list[Any], section: str, n: int, k: int, rows: int, feature: str
) -> str | None:
    """With the engine's wrappers installed, ``runner`` offers its stock list, then only
    a pinned tactic of it, then its stock list again; else the reason it does not."""
    from fi_patches.pinning import stack
    from fi_patches.pinning.installation import hold_for
    from fi_patches.pins.table import PinTable

    held = hold_for((type(runner).__name__,))
    try:
        with stack.isolated():
            stock = [as_tactic(t) for t in runner.get_valid_tactics(inputs, None)]
        if not stock:
            return (
                f"FlashInfer's runner offers no tactics for an MXFP8 {n}x{k} problem at {rows} rows"
            )
        pin = stock[-1]
        entry = {"n": n, "k": k, "min_rows": 1, "max_rows": rows, "tactic": tactic_json(pin)}
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


def pinned_tactics(device: Device) -> str | None:
    """The low-latency runner of ``device`` takes the pin."""
    from fi_patches.pinning.serving import mxfp8_runner_inputs

    n, k = _SMALL
    rows = 8
    runner = fi.low_latency_runner(device.sm_version or 0, True)
    return offers_exactly_the_pin(
        runner, mxfp8_runner_inputs(n, k, rows), "low_latency", n, k, rows, fi.PINNED_TACTICS
    )


def pinned_cute_dsl(device: Device) -> str | None:
    """The cute-dsl runner of ``device`` takes the pin (its tactic list reads the CUDA device's
    SM count, so this needs the device)."""
    import torch

    from fi_patches.cute_dsl import cute_dsl_runner
    from fi_patches.pinning.serving import mxfp8_runner_inputs

    sm = device.sm_version or 0
    runner = cute_dsl_runner(sm // 10, sm % 10, torch.bfloat16)
    n, k = _SMALL
    rows = 64
    try:
        return offers_exactly_the_pin(
            runner, mxfp8_runner_inputs(n, k, rows), "cute_dsl", n, k, rows, fi.PINNED_CUTE_DSL
        )
    except Exception as exc:
        if not torch.cuda.is_available() and _is_device_query(exc):
            return (
                "FlashInfer's cute-dsl runner reads the CUDA device's SM count to list its "
                f"tactics, so it cannot be checked without the device ({type(exc).__name__})"
            )
        raise


def _is_device_query(exc: BaseException) -> bool:
    """Whether ``exc`` is CPU-only torch refusing a CUDA device query (what the cute-dsl
    runner's SM-count read raises without a device), rather than anything else going wrong."""
    text = str(exc)
    return "CUDA" in text or "cuda" in text or "NVIDIA" in text


WIDE_CHECK_TILE = 16


def wide_tile(device: Device) -> str | None:
    """FlashInfer's kernel class accepts a wide tactic for a 7168x1536 weight at a 16-row tile
    on the device (the cheap part, run in every process)."""
    from fi_patches.wide.tactics import wide_tactics

    if not wide_tactics(7168, 1536, WIDE_CHECK_TILE, arch=f"{device.arch}a"):
        return f"no valid wide tactic for a 7168x1536 weight at tile {WIDE_CHECK_TILE}"
    return None


def wide_tile_compiled(device: Device) -> str | None:
    """FlashInfer's kernel class, subclassed, compiles a 16-row tile for the device, and its PTX
    issues the MMA with N = 16 and keeps the PDL ordering (cached: a compile)."""
    from fi_patches.wide.kernel import compile_wide
    from fi_patches.wide.ptx import descriptors, parse_entry, pdl_order
    from fi_patches.wide.tactics import wide_tactics

    arch = f"{device.arch}a"
    tactics = wide_tactics(7168, 1536, WIDE_CHECK_TILE, arch=arch)
    if not tactics:
        return f"no valid wide tactic for a 7168x1536 weight at tile {WIDE_CHECK_TILE}"
    kernel = compile_wide(WIDE_CHECK_TILE, tactics[0], arch=arch)
    if kernel.ptx is None:
        return "the DSL kept no PTX for the compiled kernel"
    entry = parse_entry(kernel.ptx)
    widths = {d.n for choices in descriptors(entry) for d in choices}
    if widths != {WIDE_CHECK_TILE}:
        return (
            f"the compiled MMA runs N = {sorted(widths)}, not the requested tile {WIDE_CHECK_TILE}"
        )
    order = pdl_order(entry)
    if not order.ok:
        return f"the compiled kernel lost its PDL ordering ({order})"
    return None


def _probe_table(mode_note: str) -> Any:
    from fi_patches.internals import tuner as fi_tuner
    from fi_patches.pins.table import PinTable

    pin = {
        "op": fi_tuner.PROBE_OP,
        "runner": fi_tuner.probe_runner_class().__name__,
        "shapes": [["rows", 64], [64, 32]],
        "min_rows": 1,
        "max_rows": 8,
        "tactic": [1, 2],
    }
    return PinTable.from_mapping(
        {"meta": {"device": "*", "flashinfer": ""}, "pin": [pin]}, source=f"<{mode_note}>"
    )


def _probe_call() -> tuple[Any, list[Any], Any]:
    import torch

    from fi_patches.internals import tuner as fi_tuner

    runner = fi_tuner.probe_runner_class()()
    inputs = [torch.empty(6, 64), torch.empty(64, 32)]
    return runner, inputs, fi_tuner.tuner()


def pinned_ops(device: Device) -> str | None:
    """A ``[[pin]]`` for a runner of fi_patches' own (as any new FlashInfer op's would be)
    reaches it: it offers its stock list, then only the pin for a key in the pinned range,
    its stock list for a key outside it, and its stock list again after."""
    from fi_patches.pinning import stack
    from fi_patches.pinning.installation import hold_for

    runner, inputs, _ = _probe_call()
    held = hold_for((type(runner).__name__,))
    try:
        stock = list(runner.get_valid_tactics(inputs, None))
        with stack.isolated(_probe_table("self-check")):
            pinned = list(runner.get_valid_tactics(inputs, None))
            wide = list(runner.get_valid_tactics([inputs[0].new_empty(16, 64), inputs[1]], None))
        if pinned != [(1, 2)]:
            return f"a [[pin]] of (1, 2) made the runner offer {pinned}, so the patch misses it"
        if wide != stock:
            return f"a key outside the pinned rows was offered {wide}, not the stock {stock}"
        if list(runner.get_valid_tactics(inputs, None)) != stock:
            return "the runner's stock tactics changed after a pinned call"
    finally:
        held.release()
    return None


def preseed(device: Device) -> str | None:
    """Inside a preseed scope FlashInfer's own cache lookup returns the pin for a pinned key
    of fi_patches' probe op, and misses outside it, writing nothing into the tuner's cache."""
    from fi_patches.internals import tuner as fi_tuner
    from fi_patches.pinning import stack
    from fi_patches.pinning.index import PRESEED
    from fi_patches.pinning.installation import hold_for

    runner, inputs, instance = _probe_call()
    shapes = tuple(tuple(t.shape) for t in inputs)
    config = fi_tuner.probe_config()
    winners = dict(fi_tuner.live_winners(instance))
    held = hold_for((type(runner).__name__,))
    try:
        with stack.isolated(_probe_table("self-check"), mode=PRESEED):
            hit = instance.search_cache(fi_tuner.PROBE_OP, [runner], shapes, config, inputs)
        miss = instance.search_cache(fi_tuner.PROBE_OP, [runner], shapes, config, inputs)
    finally:
        held.release()
    if not (hit[0] and tuple(hit[2]) == (1, 2)):
        return f"FlashInfer's cache lookup returned {hit[:3]} for a preseeded (1, 2)"
    if miss[0]:
        return f"after the scope FlashInfer's cache lookup still hit ({miss[:3]})"
    if dict(fi_tuner.live_winners(instance)) != winners:
        return "the lookups changed FlashInfer's cache"
    return None
