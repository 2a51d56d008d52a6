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

import functools
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from fi_patches._logging import get_logger, log_once
from fi_patches.compat.device import Device
from fi_patches.patching import AttributePatch, PatchSet, RunnerMethodPatch
from fi_patches.pinning import stack
from fi_patches.pinning.stack import _scope, current_index, find
from fi_patches.pinning.targets import LOW_LATENCY, PINNED_RUNNERS, PinnedRunner

logger = get_logger(__name__)

_MISS = (False, 0, -1, None)

# Per runner class: (problem, dtypes, pin) -> whether the stock list offers the pin.
_offered: weakref.WeakKeyDictionary[type, dict[tuple[Any, ...], bool]] = weakref.WeakKeyDictionary()


def _dtype_key(inputs: Sequence[Any]) -> tuple[Any, ...]:
    out_dtype = getattr(inputs[5], "dtype", None) if len(inputs) > 5 else None
    return (inputs[0].dtype, inputs[1].dtype, out_dtype, len(inputs))


def _valid_tactics_replacement(target: PinnedRunner) -> Any:
    """``make(original, gate)`` for the runner class's ``get_valid_tactics``."""
    section, weight_inputs, problem_of = target.section, target.weight_inputs, target.problem

    def make(original: Any, gate: Any) -> Any:
        def stock(self: Any, inputs: Any, profile: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
            if args or kwargs:
                return original(self, inputs, profile, *args, **kwargs)
            return original(self, inputs, profile)

        @functools.wraps(original)
        def get_valid_tactics(
            self: Any, inputs: Any, profile: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            scope = _scope.get()
            index = scope.with_process() if stack._process_tables else scope.index
            shapes = index.get(section) if index is not None else None
            if shapes is None or not gate.active:
                if args or kwargs:
                    return original(self, inputs, profile, *args, **kwargs)
                return original(self, inputs, profile)
            try:
                form = weight_inputs.get(len(inputs))
                if form is None:
                    return stock(self, inputs, profile, args, kwargs)
                weight = inputs[form[0]].shape
                group = (shapes.by_kn if form[1] else shapes.by_nk).get(weight)
                if group is None:
                    return stock(self, inputs, profile, args, kwargs)
                problem = problem_of(inputs, None)
                entry = _covering(group, problem[2]) if problem else None
            except Exception:
                log_once(
                    logger,
                    30,
                    f"problem:{target.class_name}",
                    "fi_patches could not read the problem of %s inputs; offering the stock "
                    "tactics",
                    target.class_name,
                    exc_info=True,
                )
                return stock(self, inputs, profile, args, kwargs)
            if entry is None:
                return stock(self, inputs, profile, args, kwargs)
            return _offer(target, entry, problem, original, self, inputs, (profile, *args), kwargs)

        return get_valid_tactics

    return make


def _covering(group: tuple[Any, ...], rows: int) -> Any:
    for entry in group:
        if entry.min_rows <= rows <= entry.max_rows:
            return entry
    return None


def _offer(
    target: PinnedRunner,
    entry: Any,
    problem: tuple[int, int, int],
    original: Any,
    runner: Any,
    inputs: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> list[Any]:
    """``[pin]`` when the runner's stock list offers it for this problem (checked once per
    runner class and problem), else the stock list and a warning."""
    pin = entry.tactic
    key = (problem, _dtype_key(inputs), pin)
    verdicts = _offered.get(type(runner))
    if verdicts is None:
        verdicts = _offered.setdefault(type(runner), {})
    offered = verdicts.get(key)
    if offered is None:
        stock = original(runner, inputs, *args, **kwargs)
        offered = pin in [target.normalize(t) for t in stock]
        verdicts[key] = offered
        if not offered:
            log_once(
                logger,
                30,
                f"notoffered:{target.class_name}:{key}",
                "pinned tactic %s ([[%s]] #%d) is not among the %d tactics FlashInfer's %s "
                "offers for n=%d k=%d rows=%d; offering the stock tactics",
                pin,
                target.section,
                entry.index,
                len(stock),
                target.class_name,
                *problem,
            )
            return list(stock)
    if not offered:
        return original(runner, inputs, *args, **kwargs)  # type: ignore[no-any-return]
    return [pin]


def _targets_by_class() -> dict[str, PinnedRunner]:
    return {t.class_name: t for t in PINNED_RUNNERS}


def _pinned_miss(result: Any, args: tuple[Any, ...], kwargs: dict[str, Any], index: Any) -> bool:
    """Whether a tuner cache hit is a pinned problem's non-pinned tactic (to be re-tuned)."""
    if not result[0]:
        return False
    runner_id, tactic = result[1], result[2]
    runners = args[1] if len(args) > 1 else kwargs["runners"]
    shapes = args[2] if len(args) > 2 else kwargs["input_shapes"]
    inputs = args[4] if len(args) > 4 else kwargs.get("inputs")
    runner = runners[runner_id]
    target = _targets_by_class().get(type(runner).__name__)
    if target is None or inputs is None or type(runner).__module__ != target.module:
        return False
    problem = target.problem(inputs, shapes)
    entry = find(index, target.section, *problem) if problem else None
    if entry is None or target.normalize(tactic) == entry.tactic:
        return False
    logger.debug(
        "tuning: cached tactic %s for pinned n=%d k=%d rows=%d is not the pin %s; re-tuning",
        tactic,
        *problem,
        entry.tactic,
    )
    return True


def _search_cache_replacement(original: Any, gate: Any) -> Any:
    """``AutoTuner.search_cache`` that, while tuning, misses on a pinned problem's stale hit."""

    @functools.wraps(original)
    def search_cache(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if not self.is_tuning_mode or not gate.active:
            return result
        index = current_index()
        if index is None:
            return result
        try:
            if _pinned_miss(result, args, kwargs, index):
                return _MISS
        except Exception:
            log_once(
                logger,
                30,
                "search_cache",
                "fi_patches could not inspect a tuner cache hit; keeping FlashInfer's result",
                exc_info=True,
            )
        return result

    return search_cache


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
                _valid_tactics_replacement(t),
            )
            for t in PINNED_RUNNERS
        ]
        patches.append(AttributePatch(AutoTuner, "search_cache", _search_cache_replacement))
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
