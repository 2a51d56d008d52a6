"""The wrappers that make pins take effect, installed once while any pins are active.

Two FlashInfer objects are wrapped:

* ``get_valid_tactics`` of each pinned runner class (found among ``TunableRunner``'s subclasses,
  present and future), so the tuner, and anyone asking the runner, is offered only the pin.
  ``forward`` keeps validating against the stock list, so a tactic cached earlier still runs.
* ``AutoTuner.search_cache``, so that while tuning, a winner cached before the pins for a pinned
  problem counts as a miss and the problem is tuned again over the pin alone.

Both fall back to FlashInfer's own behaviour on any surprise and log it once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.device import Device
from fi_patches.patching import AttributePatch, PatchSet, RunnerMethodPatch
from fi_patches.pinning import stack
from fi_patches.pinning.targets import LOW_LATENCY, PINNED_RUNNERS, PinnedRunner

logger = get_logger(__name__)

_MISS = (False, 0, -1, None)

# Per runner class: (problem, dtypes, pin) -> whether the stock list offers the pin.
_offered: weakref.WeakKeyDictionary[type, dict[tuple[Any, ...], bool]] = weakref.WeakKeyDictionary()


def _dtype_key(inputs: Sequence[Any]) -> tuple[Any, ...]:
    out_dtype = getattr(inputs[5], "dtype", None) if len(inputs) > 5 else None
    return (*(getattr(x, "dtype", x) for x in inputs[:2]), out_dtype, len(inputs))


def _valid_tactics_wrapper(target: PinnedRunner) -> Any:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tables = stack.active_tables()
        if not tables:
            return wrapped(*args, **kwargs)
        try:
            inputs = args[0] if args else kwargs["inputs"]
            problem = target.problem(inputs, None)
            entry = stack.lookup(tables, target.section, *problem) if problem else None
        except Exception:
            log_once(
                logger,
                30,
                f"problem:{target.class_name}",
                "fi_patches could not read the problem of %s inputs; offering the stock tactics",
                target.class_name,
                exc_info=True,
            )
            return wrapped(*args, **kwargs)
        if entry is None:
            return wrapped(*args, **kwargs)
        pin = entry.tactic
        key = (problem, _dtype_key(inputs), pin)
        verdicts = _offered.setdefault(type(instance), {})
        offered = verdicts.get(key)
        if offered is None:
            stock = wrapped(*args, **kwargs)
            offered = pin in [target.normalize(t) for t in stock]
            verdicts[key] = offered
            if not offered:
                log_once(
                    logger,
                    30,
                    f"notoffered:{target.class_name}:{key}",
                    "pinned tactic %s (%s #%d) is not among the %d tactics FlashInfer's %s offers "
                    "for n=%d k=%d rows=%d; offering the stock tactics",
                    pin,
                    entry.__class__.__name__,
                    entry.index,
                    len(stock),
                    target.class_name,
                    *problem,
                )
                return stock
        if not offered:
            return wrapped(*args, **kwargs)
        return [pin]

    return wrapper


def _targets_by_class() -> dict[str, PinnedRunner]:
    return {t.class_name: t for t in PINNED_RUNNERS}


def _search_cache_wrapper(
    wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    result = wrapped(*args, **kwargs)
    tables = stack.active_tables()
    if not tables or not getattr(instance, "is_tuning_mode", False):
        return result
    try:
        if not result[0]:
            return result
        runner_id, tactic = result[1], result[2]
        runners = args[1] if len(args) > 1 else kwargs["runners"]
        shapes = args[2] if len(args) > 2 else kwargs["input_shapes"]
        inputs = args[4] if len(args) > 4 else kwargs.get("inputs")
        runner = runners[runner_id]
        target = _targets_by_class().get(type(runner).__name__)
        if target is None or inputs is None or type(runner).__module__ != target.module:
            return result
        problem = target.problem(inputs, shapes)
        entry = stack.lookup(tables, target.section, *problem) if problem else None
        if entry is None or target.normalize(tactic) == entry.tactic:
            return result
    except Exception:
        log_once(
            logger,
            30,
            "search_cache",
            "fi_patches could not inspect a tuner cache hit; keeping FlashInfer's result",
            exc_info=True,
        )
        return result
    logger.debug(
        "tuning: cached tactic %s for pinned n=%d k=%d rows=%d is not the pin %s; re-tuning",
        tactic,
        *problem,
        entry.tactic,
    )
    return _MISS


class _Installation:
    """Reference-counted installation of the wrappers (first acquire installs, last release
    restores the original objects)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.patches: PatchSet | None = None

    def _build(self) -> PatchSet:
        from flashinfer.autotuner import AutoTuner, TunableRunner

        patches: list[Any] = [
            RunnerMethodPatch(
                TunableRunner,
                t.module,
                t.class_name,
                "get_valid_tactics",
                _valid_tactics_wrapper(t),
            )
            for t in PINNED_RUNNERS
        ]
        patches.append(AttributePatch(AutoTuner, "search_cache", _search_cache_wrapper))
        return PatchSet(patches)

    def acquire(self) -> None:
        with self.lock:
            if self.count == 0:
                patches = self._build()
                patches.apply()  # raises PatchError with nothing left applied
                self.patches = patches
            self.count += 1

    def release(self) -> None:
        with self.lock:
            if self.count == 0:
                return
            self.count -= 1
            if self.count == 0 and self.patches is not None:
                self.patches.revert()
                self.patches = None

    @property
    def installed(self) -> bool:
        return self.count > 0


installation = _Installation()


def _probe_inputs(n: int, k: int, rows: int) -> list[Any]:
    """``mm_mxfp8``'s 7 inputs for an MXFP8 problem, as CPU tensors the runner only inspects."""
    import torch

    a = torch.empty(rows, k, dtype=torch.float8_e4m3fn)
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn).t()
    scales = torch.empty(128 * (k // 32), dtype=torch.uint8)
    weight_scales = torch.empty(n * (k // 32), dtype=torch.uint8)
    out = torch.empty(rows, n, dtype=torch.bfloat16)
    workspace = torch.empty(1, dtype=torch.uint8)
    return [a, b, scales, weight_scales, torch.bfloat16, out, workspace]


def self_check(device: Device) -> str | None:
    """The real low-latency runner for ``device`` offers exactly a pinned tactic once patched,
    and its stock list otherwise."""
    import importlib

    from fi_patches.pins.table import PinTable

    gemm_base = importlib.import_module(LOW_LATENCY.module)
    factory = gemm_base._cutedsl_low_latency_blockscaled_gemm_runner
    n, k, rows = 512, 1024, 8
    runner = factory(device.sm_version, True)
    inputs = _probe_inputs(n, k, rows)
    installation.acquire()
    try:
        with stack.isolated():
            stock = list(runner.get_valid_tactics(inputs, None))
        if not stock:
            return (
                f"FlashInfer's low-latency runner offers no tactics for an MXFP8 {n}x{k} "
                f"problem on {device.arch}"
            )
        pin = tuple(stock[-1])
        table = PinTable.from_mapping(
            {
                "meta": {"device": "*", "flashinfer": ""},
                "low_latency": [
                    {"n": n, "k": k, "min_rows": 1, "max_rows": 8, "tactic": list(pin)}
                ],
            },
            source="<self-check>",
        )
        with stack.isolated(table):
            pinned = [tuple(t) for t in runner.get_valid_tactics(inputs, None)]
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
        installation.release()
    return None
