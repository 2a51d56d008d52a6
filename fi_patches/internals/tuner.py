"""FlashInfer's tuner contract, as fi_patches' pinning engine relies on it: ``choose_one`` and
its cache lookup, the cache key and its file form, runners' tactic lists and key extras, the
profiling call, and the two forms its caches take on disk (the v1 JSON file and the v2 store).
Every op FlashInfer tunes goes through these, so pinning any op needs these internals and no
per-op declaration.

The behavioural checks run FlashInfer's own tuner code on a runner of fi_patches' own (no
device, no tensors): a key built by FlashInfer must read back, through
:mod:`fi_patches.pins.keys`, as the key fi_patches builds for the same call, and a cache
FlashInfer's own writers write must read back, through the file-form readers below (which
:mod:`fi_patches.tools.record` reads caches with), to the key and tactic written. That round
trip writes two temporary caches, so it is verification (``verification=True``): a serving
process on a release the compat matrix ran takes the matrix's verdict for it.

The second part of this module (its tune group) is every FlashInfer and torch.distributed
internal the rank guard (``fi_patches.ranks``) uses, in the boundary's form: each declared with
its signature, and the accessors and call-shape readers the guard calls. None of them gates a
feature but the profile-inputs builder, which the tuner's contract declares (preseed needs it):
the guard checks them itself (see ``fi_patches.ranks``) and reports what is missing. FlashInfer
0.7.4 defines its tuner in ``flashinfer.autotuner.autotuner`` and re-exports the public names
from ``flashinfer.autotuner``; the guard patches the setter where it is defined and where it is
re-exported, since callers import it from either place at call time.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from fi_patches.internals import (
    ATTRIBUTE,
    CALLABLE,
    CLASS,
    ENGINE,
    METHOD,
    PINNED_OPS,
    PRESEED,
    Declared,
    Internal,
    OneOf,
)

AUTOTUNER = "flashinfer.autotuner"
AUTOTUNER_MODULE = "flashinfer.autotuner.autotuner"
AUTOTUNE_CACHE = "flashinfer.autotune_cache"

PROBE_OP = "fi_patches_probe"
"""The custom op the behavioural checks key their probe runner under."""

PROBE_SHAPES = ((6, 64), (64, 32))
"""Input shapes of the checks' call: 6 rows (bucket 8) of a (64, 32) weight."""

PROBE_TACTIC = (3, (4, True))
"""The tactic the file-form checks write (nested: JSON writes it as lists)."""

PROBE_VERSION = "fi_patches-probe"
"""The FlashInfer version the v2 check's store manifest records (read back as metadata)."""


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


TUNING_FLAG = "is_tuning_mode"
"""The tuner instance's attribute that says it is tuning. ``flashinfer.autotune()`` assigns it
on entry and exit (0.6.18.post1 to 0.7.4), so fi_patches installs its ``choose_one`` wrapper,
which acts only while tuning, on those assignments (:data:`AUTOTUNER_GET`'s check probes it)."""


def _check_tuner_get(get: Any) -> str | None:
    instance = get()
    if not isinstance(getattr(instance, TUNING_FLAG, None), bool):
        return f"the tuner it returns has no boolean {TUNING_FLAG}"
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


def probe_key() -> tuple[Any, Any]:
    """``(FlashInfer's cache key, fi_patches' TunerKey)`` of the probe runner's call."""
    from fi_patches.pins.keys import TunerKey, extras_text

    runner = probe_runner_class()()
    extras = runner.get_cache_key_extras([])
    key = GET_CACHE_KEY.resolve()(PROBE_OP, runner, PROBE_SHAPES, probe_config(), extras)
    ours = TunerKey(PROBE_OP, type(runner).__name__, ((8, 64), (64, 32)), extras_text(extras))
    return key, ours


def _winners(found: Iterable[tuple[str, Any, Any]]) -> list[tuple[Any, Any]]:
    """``(TunerKey, tactic)`` of each winner a file form yields whose key parses and names its
    runner, as :mod:`fi_patches.tools.record` reads them."""
    from fi_patches.pins.keys import as_tactic, parse_file_key

    pairs = []
    for text, runner, tactic in found:
        key = parse_file_key(text)
        if key is not None and key.runner == runner:
            pairs.append((key, as_tactic(tactic)))
    return pairs


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _read_back(entries: list[tuple[Any, Any]], ours: Any, form: str) -> str | None:
    """None when ``entries`` (fi_patches' reading of a cache FlashInfer wrote) hold the probe's
    key and tactic, else what fi_patches read instead."""
    if entries != [(ours, PROBE_TACTIC)]:
        found = ", ".join(f"{key.file_key[:80]} -> {tactic!r}" for key, tactic in entries[:2])
        return (
            f"the {form} it wrote for {ours.file_key} with tactic {PROBE_TACTIC!r} reads back as "
            f"[{found or 'no entry'}]"
        )
    return None


class _Quiet(logging.Filter):
    """Drops FlashInfer's log records about the checks' own temporary caches."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def filter(self, record: logging.LogRecord) -> bool:
        return self.where not in record.getMessage()


def _check_v1_form(save_configs: Any) -> str | None:
    instance = AUTOTUNER_CLASS.resolve()()  # a tuner of the check's own, not the process's
    key, ours = probe_key()
    instance.profiling_cache[key] = (PROBE_TACTIC, None)
    log = TUNER_LOG.resolve() if TUNER_LOG.present() else None
    with tempfile.TemporaryDirectory(prefix="fi_patches_probe_") as root:
        quiet = _Quiet(root)
        if isinstance(log, logging.Logger):
            log.addFilter(quiet)
        try:
            save_configs(instance, str(Path(root) / "v1.json"))
        finally:
            if isinstance(log, logging.Logger):
                log.removeFilter(quiet)
        data = _read_json(Path(root) / "v1.json")
    entries = _winners(v1_winners(data)) if isinstance(data, dict) else []
    metadata = v1_metadata(data) if isinstance(data, dict) else {}
    problem = _read_back(entries, ours, "v1 file")
    if problem is None and not isinstance(metadata.get(METADATA_VERSION), str):
        problem = f"the v1 file it wrote has no {V1_METADATA}.{METADATA_VERSION} fi_patches reads"
    return problem


def _check_v2_form(publish: Any) -> str | None:
    from fi_patches.pins.keys import tactic_json

    key, ours = probe_key()
    with tempfile.TemporaryDirectory(prefix="fi_patches_probe_") as root:
        store = V2_STORE.resolve()({METADATA_VERSION: PROBE_VERSION}, root)
        publish(store, str(key.file_key), ours.runner, tactic_json(PROBE_TACTIC))
        envs = [Path(root)] + [p.parent for e in V2_ENVIRONMENTS for p in Path(root).glob(e)]
        metadata: dict[str, Any] = {}
        found = []
        for env in dict.fromkeys(envs):
            if (env / V2_MANIFEST).is_file():
                metadata = v2_metadata(_read_json(env / V2_MANIFEST)) or metadata
            found += [v2_winner(_read_json(f)) for f in sorted(env.glob(V2_ENTRIES))]
        entries = _winners(w for w in found if w is not None)
    problem = _read_back(entries, ours, "v2 store")
    if problem is None and metadata.get(METADATA_VERSION) != PROBE_VERSION:
        problem = f"the v2 store's manifest reads back as {metadata!r}, not its metadata"
    return problem


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
"""Every tuned op's entry: while tuning, fi_patches notes the op and its runners here (the
wrapper is installed only while the tuner's :data:`TUNING_FLAG` is set)."""

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

PROFILING_CACHE = Internal(
    "profiling_cache",
    ATTRIBUTE,
    AUTOTUNER,
    "AutoTuner.get().profiling_cache",
    (PRESEED,),
    check=_check_mapping,
)
"""The live in-process winners (``fi_patches.tools.record.from_tuner`` reads them; preseed's
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

SAVE_CONFIGS = Internal(
    "save_configs",
    METHOD,
    AUTOTUNER,
    "AutoTuner.save_configs",
    (PINNED_OPS,),
    params=("path",),
    check=_check_v1_form,
    verification=True,
)
"""FlashInfer's v1 writer (``autotune(cache=...)``, vLLM's and SGLang's files): what it writes
for a tuner of the check's own must read back through :func:`v1_winners`."""

V2_STORE = Internal(
    "v2_store",
    CLASS,
    AUTOTUNE_CACHE,
    "ManagedAutotuneCache",
    (PINNED_OPS,),
    params=("manifest", "root"),
    optional=True,
)
V2_PUBLISH = Internal(
    "v2_store_publish",
    METHOD,
    AUTOTUNE_CACHE,
    "ManagedAutotuneCache.publish",
    (PINNED_OPS,),
    params=("file_key", "runner_name", "json_tactic"),
    check=_check_v2_form,
    optional=True,
    verification=True,
)
"""The v2 store's writer (``autotune_v2``): one entry it publishes in a store of the check's own
must read back through :func:`v2_winner` and :data:`V2_ENTRIES`."""

TUNER_LOG = Internal("tuner_logger", ATTRIBUTE, AUTOTUNER_MODULE, "logger", (), optional=True)
"""The logger FlashInfer's writers report to: the file-form checks drop its records about
their own temporary caches (where it is there)."""

AUTOTUNE_V2 = Internal(
    "autotune_v2", CALLABLE, "flashinfer", "autotune_v2", (), params=("mode",), optional=True
)
"""FlashInfer's managed-store tuning context (0.7.0+), where present."""

CONTRACT = (
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
    PROFILING_CACHE,
    PREPARE_INPUTS,
    TUNING_CONFIG_CLASS,
    DYNAMIC_TENSOR_SPEC,
    SAVE_CONFIGS,
    V2_STORE,
    V2_PUBLISH,
    TUNER_LOG,
    AUTOTUNE_V2,
)
"""FlashInfer's tuner contract, in the order ``doctor --json`` lists its probes (the tune group's
follow, :data:`INTERNALS`)."""


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
    return bool(getattr(instance, TUNING_FLAG))


def nearest_profile(instance: Any, shapes: Any, config: Any) -> tuple[tuple[int, ...], ...]:
    """The profile FlashInfer's key holds for a call of ``shapes`` under ``config``."""
    found = instance._find_nearest_profile(tuple(tuple(s) for s in shapes), config)
    return tuple(tuple(int(d) for d in s) for s in found)


def shaped_inputs(config: Any, length: int) -> frozenset[int] | None:
    """The inputs (of ``length``) whose shape in the profile FlashInfer keys a call on may differ
    from the call's own: those a ``DynamicTensorSpec`` of ``config`` buckets and those a
    ``ConstraintSpec`` blanks. ``_find_nearest_profile`` keeps every other input's shape as the
    call's (0.6.18.post1 to 0.7.4), so a serving lookup can be told from one of those alone.
    None where ``config`` does not read so."""
    try:
        named: list[int] = []
        for spec in config.dynamic_tensor_specs:
            named.extend(int(i) for i in spec.input_idx)
        for spec in config.constraint_specs:
            found = spec.input_idx
            named.extend([int(found)] if isinstance(found, int) else (int(i) for i in found))
    except Exception:
        return None
    return frozenset(i + length if i < 0 else i for i in named)


def profile_inputs(instance: Any, profile: Any, inputs: Any) -> list[Any]:
    """The inputs FlashInfer's tuner profiles ``profile`` (one bucket) on, built from a call's."""
    return list(PREPARE_INPUTS.resolve()(instance, profile, inputs))


def live_winners(instance: Any) -> MutableMapping[Any, Any]:
    """The in-process winners FlashInfer tuned or loaded (``profiling_cache``)."""
    store: MutableMapping[Any, Any] = instance.profiling_cache
    return store


# the cache files' forms --------------------------------------------------------------------------

V1_METADATA = "_metadata"
"""The v1 file's member holding the environment it was tuned in; every other member whose name
starts with ``_`` is FlashInfer's bookkeeping (its generation hash, namespaced records)."""

METADATA_VERSION = "flashinfer_version"
"""The metadata field naming the FlashInfer release a cache was tuned on."""

V2_MANIFEST = "manifest.json"
"""A v2 store environment's manifest (its metadata, flat in 0.7.x)."""

V2_ENVIRONMENTS = ("v2/*/" + V2_MANIFEST, "*/" + V2_MANIFEST)
"""Where a store root's environments' manifests are (``<root>/v2/<environment hash>/``; a
directory one level down is read too)."""

V2_ENTRIES = "entries/*.json"
"""An environment's entry files, one per key."""

V2_ENTRY_FIELDS = ("key", "runner", "tactic")
"""An entry file's fields fi_patches reads: the file key, the runner class name, the tactic."""


def v1_winners(data: Mapping[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """``(file key, runner class name, tactic)`` of each entry of a v1 file's JSON object
    (``{key: [runner, tactic, policy?, selection?], "_metadata": {...}}``)."""
    for key, value in data.items():
        if key.startswith("_") or not isinstance(value, list) or len(value) < 2:
            continue
        yield key, value[0], value[1]


def v1_metadata(data: Mapping[str, Any]) -> dict[str, Any]:
    """The environment metadata of a v1 file's JSON object (empty where it has none)."""
    found = data.get(V1_METADATA, {})
    return dict(found) if isinstance(found, dict) else {}


def v2_winner(item: object) -> tuple[str, Any, Any] | None:
    """``(file key, runner class name, tactic)`` of one v2 entry file's JSON, or None when it
    is not an entry (as FlashInfer's lookup, which misses on an entry lacking any of them)."""
    if not isinstance(item, dict) or not all(f in item for f in V2_ENTRY_FIELDS):
        return None
    return str(item["key"]), item["runner"], item["tactic"]


def v2_metadata(manifest: object) -> dict[str, Any] | None:
    """The metadata of a v2 environment's manifest JSON (0.7.x manifests are flat), or None
    when it is not one."""
    if not isinstance(manifest, dict):
        return None
    found = manifest.get("metadata", manifest)
    return dict(found) if isinstance(found, dict) else None


# the tune group (the rank guard's) ---------------------------------------------------------------

TUNER_MODULES = ("flashinfer.autotuner.autotuner", "flashinfer.autotuner")
"""Where the tuner's private tune-group gates may be defined, newest layout first."""

SET_GROUP = "set_autotune_process_group"
SET_GROUP_PARAMS = ("group",)
GET_GROUP = "get_autotune_process_group"

OPERATION_GATE = "_check_tuning_group_phase"
"""Called at the start of ``choose_one`` under a tune group with phase ``"operation"`` and
selection ``("choose_one", custom_op, [runner class names], ...)``."""
OPERATION_GATE_PARAMS = ("phase", "selection", "error")
OPERATION_PHASE = "operation"

CANDIDATE_GATE = "_sync_oom_across_tune_group"
"""Called once per (profile, runner) with phase ``("candidates", custom_op, step, runner
index)`` and the candidate list the ranks are about to profile, before an all-reduce."""
CANDIDATE_GATE_PARAMS = ("local_oom", "phase", "selection", "error")
CANDIDATES_PHASE = "candidates"

PREPARE_INPUTS_NAME = "AutoTuner._prepare_input_tensors"
"""Builds the profiling inputs of one optimization profile (the bucket) just before the
candidates of that profile are listed."""
OPT_SHAPES = "get_opt_shapes"
"""``OptimizationProfile.get_opt_shapes()``: the shapes a profile (one bucket) tunes at."""

TACTIC_TO_JSON = "_tactic_to_json"
"""FlashInfer's canonical JSON form of a tactic, the one its own tune-group gates hash."""

C10D = "torch.distributed.distributed_c10d"
GROUP_STORE = "_get_process_group_store"
"""The key-value store a process group was created with (every backend has one)."""
GROUP_STORE_PARAMS = ("pg",)


def _gate(key: str, name: str, params: tuple[str, ...], kind: str = CALLABLE) -> OneOf:
    return OneOf(key, tuple(Internal(key, kind, m, name, params=params) for m in TUNER_MODULES))


SET_TUNE_GROUP = Internal(
    "set_autotune_process_group", CALLABLE, AUTOTUNER, SET_GROUP, params=SET_GROUP_PARAMS
)
GET_TUNE_GROUP = Internal("get_autotune_process_group", CALLABLE, AUTOTUNER, GET_GROUP)
OPERATION_GATE_FN = _gate("tune_group_operation_gate", OPERATION_GATE, OPERATION_GATE_PARAMS)
CANDIDATE_GATE_FN = _gate("tune_group_candidate_gate", CANDIDATE_GATE, CANDIDATE_GATE_PARAMS)
PREPARE_INPUTS_FN = PREPARE_INPUTS
"""Declared with the tuner's contract (above), where it also gates preseed."""
TACTIC_TO_JSON_FN = _gate("tactic_to_json", TACTIC_TO_JSON, ())
GROUP_STORE_FN = Internal(
    "process_group_store", CALLABLE, C10D, GROUP_STORE, params=GROUP_STORE_PARAMS
)

GUARD_PROBES: tuple[Declared, ...] = (SET_TUNE_GROUP, GET_TUNE_GROUP)
"""What the automatic guard needs from FlashInfer."""

DETECTOR_PROBES: tuple[Declared, ...] = (
    *GUARD_PROBES,
    OPERATION_GATE_FN,
    CANDIDATE_GATE_FN,
    PREPARE_INPUTS_FN,
    TACTIC_TO_JSON_FN,
)
"""What the tuning divergence detector needs from FlashInfer's tuner."""

STORE_PROBES: tuple[Declared, ...] = (GROUP_STORE_FN,)
"""What the fingerprint exchange needs from torch.distributed."""

TUNE_GROUP_INTERNALS: tuple[Declared, ...] = (
    *(p for p in DETECTOR_PROBES if p is not PREPARE_INPUTS_FN),
    GROUP_STORE_FN,
)
"""Every internal the rank guard uses that this module declares (the profile-inputs builder is
the tuner contract's)."""


def first_failure(probes: tuple[Declared, ...]) -> str | None:
    """The reason of the first probe that fails, or None when all hold."""
    for probe in probes:
        reason = probe.probe()
        if reason is not None:
            return reason
    return None


def autotuner() -> ModuleType:
    return importlib.import_module(AUTOTUNER)


def tuner_module() -> ModuleType:
    """The module defining the tuner's tune-group gates."""
    for name in TUNER_MODULES:
        module = importlib.import_module(name)
        if callable(getattr(module, CANDIDATE_GATE, None)):
            return module
    raise AttributeError(f"none of {', '.join(TUNER_MODULES)} defines {CANDIDATE_GATE}")


def setter_owners() -> list[ModuleType]:
    """The modules whose ``set_autotune_process_group`` attribute is FlashInfer's setter: where
    it is re-exported and where it is defined (one module on layouts without a package)."""
    package = autotuner()
    setter = getattr(package, SET_GROUP)
    owners = [package]
    defining = importlib.import_module(getattr(setter, "__module__", AUTOTUNER))
    if defining is not package and vars(defining).get(SET_GROUP) is setter:
        owners.append(defining)
    return owners


def tune_group() -> Any:
    """The process group FlashInfer's tuner synchronizes over now, or None."""
    getter: Callable[[], Any] = getattr(autotuner(), GET_GROUP)
    return getter()


def tuner_class() -> type:
    """FlashInfer's ``AutoTuner``, the owner of ``_prepare_input_tensors``."""
    owner, _ = PREPARE_INPUTS_NAME.split(".")
    tuner: type = getattr(tuner_module(), owner)
    return tuner


def tactic_json(tactic: Any) -> Any:
    """``tactic`` in FlashInfer's canonical JSON form."""
    return getattr(tuner_module(), TACTIC_TO_JSON)(tactic)


def group_store(group: Any) -> Any:
    """The ``torch.distributed.Store`` that ``group`` was created with."""
    getter = getattr(importlib.import_module(C10D), GROUP_STORE)
    return getter(group)


@dataclass(frozen=True)
class CandidateGateCall:
    """One call of the candidate gate: ``phase`` is ``("candidates", op, step, runner index)``,
    ``selection`` the list about to be profiled; ``failed`` when this rank could not prepare
    the runner (FlashInfer then coordinates the fallback itself)."""

    op: str
    step: int
    runner_index: int
    selection: Sequence[Any]
    failed: bool


def _bound(
    params: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    bound = dict(zip(params, args, strict=False))  # the leading positional arguments
    bound.update(kwargs)
    return bound


def candidate_gate_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> CandidateGateCall | None:
    """The candidate gate's arguments, or None for the gate's other phases."""
    bound = _bound(CANDIDATE_GATE_PARAMS, args, kwargs)
    phase = bound.get("phase")
    if not (isinstance(phase, tuple) and len(phase) == 4 and phase[0] == CANDIDATES_PHASE):
        return None
    failed = bool(bound.get("local_oom")) or bool(bound.get("error"))
    return CandidateGateCall(
        str(phase[1]), int(phase[2]), int(phase[3]), bound.get("selection", ()), failed
    )


def operation_gate_call(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, list[str]] | None:
    """``(op, runner class names)`` of an ``"operation"`` gate call, whose selection is
    ``("choose_one", op, [runner class names], ...)``; None for other phases."""
    bound = _bound(OPERATION_GATE_PARAMS, args, kwargs)
    if bound.get("phase") != OPERATION_PHASE:
        return None
    selection = bound.get("selection", ())
    return str(selection[1]), [str(name) for name in selection[2]]


def profile_shapes(profile: Any) -> str:
    """The shapes an optimization profile tunes at, as text (the bucket, in a message)."""
    shapes = getattr(profile, OPT_SHAPES)()
    return str(tuple(tuple(int(d) for d in shape) for shape in shapes))


INTERNALS: tuple[Declared, ...] = (*CONTRACT, *TUNE_GROUP_INTERNALS)
"""Every internal this module declares: the tuner's contract, then the tune group's."""
