"""One drift case, run in a process of its own (a fork of the zygote, or ``python -m
tests.drift`` for debugging): simulate the sm_103 device, break one internal of the real
FlashInfer, then use fi_patches as a consumer would and record what happened. The verdict is
drawn later (``verdict.py``), against the baseline: the same run with nothing broken.

The device simulation (``tests/simulation.py``) is applied BEFORE the mutation, so it can never
put back what the mutation removed, and it makes the baseline richer: with the SM count
simulated, ``pinned_cute_dsl``'s self-check passes on CPU, so all features start enabled and a
mutation that reaches one shows as a state change.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

N, K = 7168, 1536
"""The weight shape every check uses (an attention projection of the docs' examples)."""

PINNED_ROWS = 8
"""The low-latency rows the table pins (its entry covers 5..8)."""

MM_ROWS = (4, 16, 100)
"""Rows ``mxfp8.mm`` is called with: the low-latency, wide (the table's tile 16) and pinned
cute-dsl routes."""

ROUTE_FEATURES = {
    "cutedsl_low_latency": "pinned_tactics",
    "wide": "wide_tile",
    "pinned_cute_dsl": "pinned_cute_dsl",
}
"""The feature each non-stock route of ``mxfp8.mm`` needs."""

LOW_LATENCY_RUNNER = "low_latency_runner"
"""The key of the low-latency runner factory, whose runner the checks ask for tactics."""

ENV = {"FI_PATCHES_DEVICE": "sm_103", "FI_PATCHES_CACHE_DIR": "off"}
"""What every case runs with (after every variable fi_patches reads is cleared): the target
device, and no self-check cache. A mutation in place changes no file, so a cached outcome of the
unbroken FlashInfer would be served where the self-check must run again."""


def set_environment() -> None:
    """Clear every variable fi_patches reads, then set :data:`ENV`."""
    from fi_patches import _env

    for variable in _env.VARIABLES:
        os.environ.pop(variable.name, None)
    os.environ.update(ENV)


def as_json(value: Any) -> Any:
    """Tactics (nested tuples of ints and bools) as JSON lists; anything else as its type's
    name, so two runs compare equal when they return the same kind of thing."""
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{type(value).__qualname__}>"


def error_of(exc: BaseException) -> dict[str, Any]:
    """An exception as the verdict needs it: its type, message and where it was raised."""
    from tests.drift.snapshot import from_fi_patches

    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    return {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc)[:400],
        "last_frame": f"{last.filename}:{last.lineno} in {last.name}" if last else "",
        "from_fi_patches": bool(last and from_fi_patches(last.filename)),
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    }


class _Logged(logging.Handler):
    """Collects fi_patches' warnings and errors, with the phase they came in."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.phase = ""
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(
            {
                "phase": self.phase,
                "level": record.levelname,
                "logger": record.name,
                "message": record.getMessage()[:400],
                "exc_info": bool(record.exc_info),
            }
        )


def simulate() -> str | None:
    """Apply the sm_103 device simulation for the rest of this process (never undone: the
    process ends with the case); None, or why it could not be applied in full on this
    release (the baseline then runs the same way)."""
    import pytest

    from tests import simulation

    try:
        simulation.install(pytest.MonkeyPatch())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


def _attempt(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"value": fn()}
    except Exception as exc:
        return {"error": error_of(exc)}


def _low_latency_factory() -> Any:
    """The low-latency runner factory at its declared path, or None when it is not there."""
    from tests.drift import mutate
    from tests.drift.cases import by_key

    internal = by_key(LOW_LATENCY_RUNNER)
    if not mutate.present(internal):  # type: ignore[arg-type]
        return None
    owner, name = mutate.owner_of(internal)  # type: ignore[arg-type]
    return getattr(owner, name)


def offered(rows: int = PINNED_ROWS) -> dict[str, Any]:
    """What FlashInfer's low-latency runner offers the tuner for ``rows`` rows of the weight:
    ``{"value": tactics}``, ``{"error": ...}``, or ``{"absent": True}``."""
    from tests.mxfp8_inputs import Mxfp8Problem

    factory = _low_latency_factory()
    if factory is None:
        return {"absent": True}

    def tactics() -> Any:
        runner = factory(103, True)
        return as_json(runner.get_valid_tactics(Mxfp8Problem(N, K, rows).runner_inputs(), None))

    return _attempt(tactics)


def served(tuner: Any, rows: int = PINNED_ROWS) -> dict[str, Any]:
    """What FlashInfer's own cache lookup serves the low-latency runner at ``rows`` rows of the
    weight outside tuning: ``{"value": tactic or None}``, ``{"error": ...}`` or
    ``{"absent": True}``."""
    from tests.mxfp8_inputs import Mxfp8Problem

    factory = _low_latency_factory()
    if factory is None or tuner is None:
        return {"absent": True}

    def lookup() -> Any:
        gemm_base = importlib.import_module("flashinfer.gemm.gemm_base")
        inputs = Mxfp8Problem(N, K, rows).runner_inputs(gemm_base.DEFAULT_WORKSPACE_SIZE)
        shapes = tuple(tuner._get_input_sizes(inputs))
        config = gemm_base._MM_MXFP8_CUTE_DSL_TUNING_CONFIG
        hit, _, tactic, _ = tuner.search_cache(
            "mxfp8_gemm", [factory(103, True)], shapes, config, inputs=inputs
        )
        return as_json(tactic) if hit else None

    return _attempt(lookup)


def _tuner() -> Any:
    """FlashInfer's tuner singleton, taken before anything is broken (None where the release
    has none at the usual place)."""
    try:
        return importlib.import_module("flashinfer.autotuner").AutoTuner.get()
    except Exception:
        return None


TUNER_STORES = ("profiling_cache", "_profiling_cache_policies")
"""The tuner's cached winners and their measurement policies (preseed answers lookups and must
leave them as they were)."""


def tuner_cache(tuner: Any) -> dict[str, dict[str, int]]:
    """Every entry of the tuner's stores, as ``repr(key)`` -> identity of the value, read from
    the instance's own namespace (a store that is gone or no mapping is left out)."""
    found: dict[str, dict[str, int]] = {}
    for name in TUNER_STORES:
        store = vars(tuner).get(name) if tuner is not None else None
        if isinstance(store, dict):
            found[name] = {repr(k): id(v) for k, v in list(store.items())}
    return found


def _declared_namespaces() -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The declared modules, and the classes (and instance) declared internals live on."""
    from fi_patches.internals import OneOf, declared
    from tests.drift import mutate

    modules, objects = [], []
    for internal in declared():
        for option in internal.options if isinstance(internal, OneOf) else (internal,):
            modules.append(option.module)
            if option.attr and mutate.present(option):
                owner, name = mutate.owner_of(option)
                if option.kind == "class":
                    objects.append(getattr(owner, name))
                elif not isinstance(owner, type(os)):
                    objects.append(owner)
    unique = list({id(o): o for o in objects}.values())
    return tuple(dict.fromkeys(modules)), tuple(unique)


def _mm(rows: int, table: str) -> dict[str, Any]:
    import torch

    import fi_patches.mxfp8
    from tests.mxfp8_inputs import Mxfp8Problem

    result: dict[str, Any] = {}
    explained = _attempt(lambda: fi_patches.mxfp8.explain(N, K, rows, pins=table).route.value)
    result["route"] = explained
    tensors = Mxfp8Problem(N, K, rows).tensors()
    if rows <= PINNED_ROWS:  # BF16 activations: mm quantizes them with FlashInfer's quantizer
        x, x_scale = torch.zeros(rows, K, dtype=torch.bfloat16), None
    else:
        x, x_scale = tensors["a"], tensors["a_scale"]
    call = _attempt(
        lambda: (
            fi_patches.mxfp8.mm(x, tensors["b"], tensors["b_scale"], x_scale=x_scale, pins=table)
            is not None
        )
    )
    result["mm"] = call
    return result


def run(key: str | None, mutation: str | None, table: str) -> dict[str, Any]:
    """Run one case (``key`` None: the baseline) in this process; returns the observation."""
    started = time.monotonic()
    set_environment()
    obs: dict[str, Any] = {"case": key and f"{key}-{mutation}", "simulation": simulate()}
    obs["version"] = importlib.import_module("flashinfer").__version__
    tuner = _tuner()
    if key is not None:
        from tests.drift import mutate
        from tests.drift.cases import by_key

        internal = by_key(key)
        options = getattr(internal, "options", (internal,))
        before = (
            getattr(*mutate.owner_of(options[0]))
            if options[0].attr and mutate.present(options[0])
            else None
        )
        try:
            obs["applied"] = mutate.apply(internal, mutation or "")
        except mutate.NotApplicable as exc:
            obs["not_applicable"] = str(exc)
            return obs
        obs["mutation_problem"] = mutate.took_effect(internal, mutation or "", before)
    obs.update(_checks(table, tuner))
    obs["seconds"] = round(time.monotonic() - started, 2)
    return obs


def _checks(table: str, tuner: Any) -> dict[str, Any]:
    from tests.drift.snapshot import Snapshot, foreign_attributes

    modules, objects = _declared_namespaces()
    logged = _Logged()
    logging.getLogger("fi_patches").addHandler(logged)
    obs: dict[str, Any] = {"offered": {"outside": offered()}, "changes": {}, "calls": {}}
    snapshot = Snapshot.take(modules, objects)

    clock = [time.monotonic()]
    obs["phase_seconds"] = {}

    def settle(phase: str) -> None:
        obs["changes"][phase] = snapshot.changes() + foreign_attributes(modules, objects)
        now = time.monotonic()
        obs["phase_seconds"][phase] = round(now - clock[0], 2)
        clock[0] = now

    logged.phase = "doctor"
    obs["doctor"] = _doctor()
    settle("doctor")

    import fi_patches

    logged.phase = "pinned_tactics"

    def block() -> Any:
        with fi_patches.pinned_tactics(table) as active:
            obs["offered"]["inside"] = offered()
            return active is not None

    obs["calls"]["pinned_tactics"] = _attempt(block)
    settle("pinned_tactics")
    obs["offered"]["after_block"] = offered()

    logged.phase = "preseed"
    cache: dict[str, Any] = {"before": tuner_cache(tuner)}

    def seeded() -> Any:
        with fi_patches.pinned_tactics(table, mode="preseed") as active:
            cache["inside"] = tuner_cache(tuner)
            cache["served_inside"] = served(tuner)
            return active is not None

    obs["calls"]["preseed"] = _attempt(seeded)
    cache["after"] = tuner_cache(tuner)
    obs["tuner_cache"] = cache
    settle("preseed")

    logged.phase = "mm"
    obs["mm"] = {str(rows): _mm(rows, table) for rows in MM_ROWS}
    settle("mm")

    logged.phase = "auto"
    os.environ["FI_PATCHES_PINS"] = table
    obs["calls"]["auto"] = _attempt(lambda: importlib.import_module("fi_patches.auto") and None)
    obs["offered"]["auto"] = offered()
    obs["calls"]["auto_explain"] = _attempt(
        lambda: fi_patches.mxfp8.explain(N, K, PINNED_ROWS).route.value
    )
    obs["calls"]["disable"] = _attempt(lambda: fi_patches.disable())
    settle("auto")
    obs["offered"]["after_auto"] = offered()
    logged.phase = ""
    obs["logged"] = logged.records
    return obs


def _doctor() -> dict[str, Any]:
    """``python -m fi_patches doctor --json``, in this process: exit code, parsed JSON."""
    from fi_patches.cli import main

    out = io.StringIO()
    result: dict[str, Any] = {}
    try:
        with contextlib.redirect_stdout(out):
            result["rc"] = main(["doctor", "--json"])
    except SystemExit as exc:
        result["rc"] = exc.code
    except Exception as exc:
        result["error"] = error_of(exc)
    text = out.getvalue()
    try:
        result["records"] = json.loads(text)
    except ValueError as exc:
        result["json_error"] = f"{exc}; stdout began {text[:300]!r}"
    return result
