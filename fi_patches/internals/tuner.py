"""FlashInfer's tuner contract, as fi_patches' pinning engine relies on it: ``choose_one`` and
its cache lookup, the cache key and its file form, runners' tactic lists and key extras, and
the profiling call. Every op FlashInfer tunes goes through these, so pinning any op needs
these internals and no per-op declaration.

The behavioural checks run FlashInfer's own tuner code on a runner of fi_patches' own (no
device, no tensors): a key built by FlashInfer must read back, through
:mod:`fi_patches.pins.keys`, as the key fi_patches builds for the same call.
"""

from __future__ import annotations

import functools
from collections.abc import MutableMapping
from typing import Any

from fi_patches.internals._declare import ATTRIBUTE, CALLABLE, CLASS, METHOD, Internal
from fi_patches.internals.names import ENGINE, PINNED_OPS, PRESEED

AUTOTUNER = "flashinfer.autotuner"

PROBE_OP = "fi_patches_probe"
"""The custom op the behavioural checks key their probe runner under."""

PROBE_SHAPES = ((6, 64), (64, 32))
"""Input shapes of the checks' call: 6 rows (bucket 8) of a (64, 32) weight."""


@functools.cache
def probe_runner_class() -> type:
    """A FlashInfer ``TunableRunner`` of fi_patches' own (three tactics, one extra), built on
    first use: the checks, and the self-check of ``pinned_ops``, exercise the tuner with it."""
    base: type = TUNABLE_RUNNER.resolve()

    class FiPatchesProbeRunner(base):  # type: ignore[misc, valid-type]
        def get_valid_tactics(self, inputs: Any, profile: Any = None) -> list[Any]:
            return [0, (1, 2), [3, [4, True]]]

        def get_cache_key_extras(self, inputs: Any) -> tuple[Any, ...]:
            return ("fi_patches", True)

        def forward(self, inputs: Any, tactic: Any = -1, **kwargs: Any) -> Any:
            return tactic

    return FiPatchesProbeRunner


def _power_of_two(rows: int) -> int:
    return 1 << max(0, int(rows) - 1).bit_length()


def _buckets(rows: int) -> tuple[int, ...]:
    return tuple(1 << i for i in range(max(1, int(rows)).bit_length()))


@functools.cache
def probe_config() -> Any:
    """A ``TuningConfig`` tuning the first input's rows in power-of-two buckets."""
    spec = DYNAMIC_TENSOR_SPEC.resolve()((0,), (0,), _buckets, _power_of_two)
    return TUNING_CONFIG_CLASS.resolve()(dynamic_tensor_specs=(spec,))


def _check_tuner_get(get: Any) -> str | None:
    instance = get()
    if not isinstance(getattr(instance, "is_tuning_mode", None), bool):
        return "the tuner it returns has no boolean is_tuning_mode"
    return None


def _check_nearest_profile(method: Any) -> str | None:
    found = method(PROBE_SHAPES, probe_config())
    expected = ((8, 64), (64, 32))
    if tuple(tuple(s) for s in found) != expected:
        return f"it maps {PROBE_SHAPES} to {found!r}, not {expected}"
    return None


def _check_cache_key(method: Any) -> str | None:
    from fi_patches.pins.keys import TunerKey, extras_text, parse_file_key

    runner = probe_runner_class()()
    extras = runner.get_cache_key_extras([])
    key = method(PROBE_OP, runner, PROBE_SHAPES, probe_config(), extras)
    ours = TunerKey(PROBE_OP, type(runner).__name__, ((8, 64), (64, 32)), extras_text(extras))
    read = parse_file_key(str(key.file_key))
    if read != ours:
        return f"its file key {str(key.file_key)[:120]!r} does not read back as {ours.file_key!r}"
    return None


def _check_mapping(value: Any) -> str | None:
    if not isinstance(value, MutableMapping):
        return f"it is {type(value).__name__}, not a mutable mapping"
    return None


TUNABLE_RUNNER = Internal("tunable_runner", CLASS, AUTOTUNER, "TunableRunner", ENGINE)
RUNNER_VALID_TACTICS = Internal(
    "runner_get_valid_tactics",
    METHOD,
    AUTOTUNER,
    "TunableRunner.get_valid_tactics",
    ENGINE,
    params=("inputs", "profile"),
)
RUNNER_KEY_EXTRAS = Internal(
    "runner_get_cache_key_extras",
    METHOD,
    AUTOTUNER,
    "TunableRunner.get_cache_key_extras",
    (PINNED_OPS,),
    params=("inputs",),
)
"""Part of every key: a ``[[pin]]`` with extras compares them with the runner's."""

AUTOTUNER_CLASS = Internal("autotuner", CLASS, AUTOTUNER, "AutoTuner", ENGINE)
AUTOTUNER_GET = Internal(
    "autotuner_get", METHOD, AUTOTUNER, "AutoTuner.get", ENGINE, check=_check_tuner_get
)
CHOOSE_ONE = Internal(
    "choose_one",
    METHOD,
    AUTOTUNER,
    "AutoTuner.choose_one",
    ENGINE,
    params=("custom_op", "runners", "tuning_config", "inputs"),
)
"""Every tuned op's entry: while tuning, fi_patches notes the op and its runners here."""

SEARCH_CACHE = Internal(
    "search_cache",
    METHOD,
    AUTOTUNER,
    "AutoTuner.search_cache",
    ENGINE,
    params=("custom_op", "runners", "input_shapes", "tuning_config", "inputs"),
)
"""The tuner's lookup: stale winners of pinned keys miss here while tuning; preseed blocks
answer pinned keys here."""

NEAREST_PROFILE = Internal(
    "find_nearest_profile",
    METHOD,
    AUTOTUNER,
    "AutoTuner._find_nearest_profile",
    ENGINE,
    params=("shapes", "tuning_config"),
    check=_check_nearest_profile,
)
"""Maps a call's input shapes to its key's profile (the bucket)."""

GET_CACHE_KEY = Internal(
    "get_cache_key",
    METHOD,
    AUTOTUNER,
    "AutoTuner._get_cache_key",
    (PINNED_OPS, PRESEED),
    params=("custom_op", "runner", "input_shapes", "tuning_config"),
    check=_check_cache_key,
)
"""The cache key and, through its ``file_key``, the form FlashInfer's files spell keys in
(``pins record`` reads that form)."""

PROFILE_SINGLE_KERNEL = Internal(
    "profile_single_kernel",
    METHOD,
    AUTOTUNER,
    "AutoTuner._profile_single_kernel",
    ENGINE,
    params=("runner", "inputs", "tactic"),
)
"""Times one candidate: for a pinned key, the default candidate that ``autotune_v2`` races
beside the runners' lists is not timed."""

GET_INPUT_SIZES = Internal(
    "get_input_sizes",
    METHOD,
    AUTOTUNER,
    "AutoTuner._get_input_sizes",
    (PRESEED,),
    params=("inputs",),
)
PROFILING_CACHE = Internal(
    "profiling_cache",
    ATTRIBUTE,
    AUTOTUNER,
    "AutoTuner.get().profiling_cache",
    (PRESEED,),
    check=_check_mapping,
)
"""The live in-process winners (``fi_patches.pins.record.from_tuner`` reads them; preseed's
self-check checks that answering a lookup writes nothing there)."""

TUNING_CONFIG_CLASS = Internal(
    "tuning_config_class",
    CLASS,
    AUTOTUNER,
    "TuningConfig",
    (PINNED_OPS,),
)
DYNAMIC_TENSOR_SPEC = Internal(
    "dynamic_tensor_spec",
    CLASS,
    AUTOTUNER,
    "DynamicTensorSpec",
    (PINNED_OPS,),
    params=("input_idx", "dim_idx"),
)
"""With ``TuningConfig``: the self-check's probe op, tuned in buckets as FlashInfer's are."""

PREPARE_INPUTS = Internal(
    "prepare_input_tensors",
    METHOD,
    AUTOTUNER,
    "AutoTuner._prepare_input_tensors",
    (PRESEED,),
    params=("profile", "inputs"),
)
"""Builds one profile's (bucket's) inputs from a call's: a preseed lookup made while tuning asks
the pinned runner's stock list on them (once per key) before answering with the pin. The tune
group's divergence detector wraps it too."""

AUTOTUNE_V2 = Internal(
    "autotune_v2", CALLABLE, "flashinfer", "autotune_v2", (), params=("mode",), optional=True
)
"""FlashInfer's managed-store tuning context (0.7.0+), where present."""

INTERNALS = (
    TUNABLE_RUNNER,
    RUNNER_VALID_TACTICS,
    RUNNER_KEY_EXTRAS,
    AUTOTUNER_CLASS,
    AUTOTUNER_GET,
    CHOOSE_ONE,
    SEARCH_CACHE,
    NEAREST_PROFILE,
    GET_CACHE_KEY,
    PROFILE_SINGLE_KERNEL,
    GET_INPUT_SIZES,
    PROFILING_CACHE,
    PREPARE_INPUTS,
    TUNING_CONFIG_CLASS,
    DYNAMIC_TENSOR_SPEC,
    AUTOTUNE_V2,
)
"""FlashInfer's tuner contract, in the order ``doctor --json`` lists its probes."""


# accessors ------------------------------------------------------------------------------------


def tuner() -> Any:
    """FlashInfer's tuner singleton."""
    return AUTOTUNER_GET.resolve()()


def tunable_runner() -> type:
    """FlashInfer's runner base class (``TunableRunner``)."""
    cls: type = TUNABLE_RUNNER.resolve()
    return cls


def autotuner_class() -> type:
    """FlashInfer's ``AutoTuner`` class (whose methods the engine wraps)."""
    cls: type = AUTOTUNER_CLASS.resolve()
    return cls


def is_tuning(instance: Any) -> bool:
    """Whether the tuner is inside ``flashinfer.autotune(True)``."""
    return bool(instance.is_tuning_mode)


def nearest_profile(instance: Any, shapes: Any, config: Any) -> tuple[tuple[int, ...], ...]:
    """The profile FlashInfer's key holds for a call of ``shapes`` under ``config``."""
    found = instance._find_nearest_profile(tuple(tuple(s) for s in shapes), config)
    return tuple(tuple(int(d) for d in s) for s in found)


def input_sizes(instance: Any, inputs: list[Any]) -> tuple[tuple[int, ...], ...]:
    """The input shapes as the tuner reads them (a non-tensor input counts as ``(0,)``)."""
    return tuple(GET_INPUT_SIZES.resolve()(instance, inputs))


def cache_key(op: str, runner: Any, shapes: Any, config: Any, extras: Any) -> Any:
    """FlashInfer's cache key for ``runner`` under ``op`` at ``shapes``."""
    return GET_CACHE_KEY.resolve()(op, runner, shapes, config, extras)


def profile_inputs(instance: Any, profile: Any, inputs: Any) -> list[Any]:
    """The inputs FlashInfer's tuner profiles ``profile`` (one bucket) on, built from a call's."""
    return list(PREPARE_INPUTS.resolve()(instance, profile, inputs))


def live_winners(instance: Any) -> MutableMapping[Any, Any]:
    """The in-process winners FlashInfer tuned or loaded (``profiling_cache``)."""
    store: MutableMapping[Any, Any] = instance.profiling_cache
    return store
