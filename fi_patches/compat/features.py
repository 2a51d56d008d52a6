"""Every fi_patches feature, declared once each, in the order ``doctor`` lists them, and the
decision, once per process, whether each is enabled and why not, from the installed package it
patches, the internals it needs, the device and the feature's self-check.

Validation, ``pins record``, the tuner-cache wrapper, ``pinned_tactics()`` and the installed
wrappers iterate over these declarations; adding a runner or a section is a change here (and its
internals in :mod:`fi_patches.internals`).

Each is a :class:`Feature`, in the manner of OpenTelemetry's ``_instruments``: the package it
patches (whose verified releases it inherits), the devices it runs on, the pin-table sections it
applies, how a table's entries are checked, and its behavioural self-check. The internals it
needs are not listed here: each internal names the features that need it
(:mod:`fi_patches.internals`), so there is one list to keep.

The verification steps (FlashInfer's cache writers' file-form round trip, the compiled
self-check that reads the kernel's PTX) run where fi_patches is verified: the CLI (``doctor``,
``pins record``, ``precompile``; so the compat matrix), the tests, and any process that calls
:func:`verify_fully`. A serving process on releases a compat matrix cell ran takes the matrix's
verdict for them instead; on a release no cell ran it still runs them, and the reason says so.

Below the declarations, what each patched package this process has: its version (read without
importing it) and whether it imports (FlashInfer 0.6.x-0.7.0.post1 fail on CPU-only torch)."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_patches import _env
from fi_patches import internals as declared_in
from fi_patches._logging import get_logger
from fi_patches._text import error_text
from fi_patches.compat.target import (
    Device,
    current_device,
    is_listed,
    is_newer_than,
    is_verified,
    neighbours,
    parse_version,
)
from fi_patches.internals import (
    CUTE_DSL,
    SGLANG,
    VLLM,
    Declared,
    Dependency,
    InternalError,
    modules_of,
)
from fi_patches.internals import PINNED_OPS as PINNED_OPS_NAME
from fi_patches.internals import flashinfer as fi
from fi_patches.internals.flashinfer import FLASHINFER

logger = get_logger(__name__)


# the features -----------------------------------------------------------------------------------


SelfCheck = Callable[["Device"], "str | None"]
"""Takes the target device; None when the patched package behaves as the feature needs, else
the reason it does not."""


def load(path: str) -> Any:
    """The object at ``module:name``, imported now (declarations stay cheap to import)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Feature:
    """What one fi_patches feature needs and owns."""

    name: str
    summary: str
    requires: tuple[Dependency, ...]
    """The packages it patches, the first the one it is mainly about (its verified range is
    the feature's); their internals it needs name this feature."""
    devices: tuple[str, ...]
    """The target archs it runs on; empty for a feature that needs no particular device (it
    is then never asked for one, so judging it initializes no CUDA context)."""
    self_check: str
    """``module:function`` of the :data:`SelfCheck`, imported only when it runs. It is cheap
    (tactic lists, cache lookups) and runs in every process, so a FlashInfer patched in memory
    by another library is judged as it is here."""
    sections: tuple[str, ...] = ()
    """The pin-table sections this feature applies (how each pins FlashInfer's tuner is its
    specialization, :mod:`fi_patches.pinning.index`)."""
    checker: str = ""
    """``module:function`` checking this feature's sections of a table against the installed
    release (a list of ``PinProblem``), imported only when a table is checked."""
    compiled_check: str = ""
    """``module:function`` of an expensive :data:`SelfCheck` (a kernel compile), run after
    ``self_check`` passes; its outcome is kept on disk (:mod:`fi_patches.compat.selfcheck_cache`)
    keyed also by the source files of the modules this feature's internals live in."""

    @property
    def verified(self) -> SpecifierSet:
        """The releases of its main package this feature is verified on."""
        return self.requires[0].verified

    def internals(self) -> tuple[Declared, ...]:
        """The internals this feature needs, in declaration order."""
        from fi_patches.internals import needed_by

        return needed_by(self.name)

    def load_self_check(self) -> SelfCheck:
        check: SelfCheck = load(self.self_check)
        return check

    def load_compiled_check(self) -> SelfCheck:
        check: SelfCheck = load(self.compiled_check)
        return check


PINNED_OPS = Feature(
    name=PINNED_OPS_NAME,
    summary="any op FlashInfer tunes is offered only its pinned tactic per tuner key ([[pin]])",
    requires=(fi.FLASHINFER,),
    devices=(),
    self_check="fi_patches.pinning.validate:pinned_ops",
    sections=("pin",),
    checker="fi_patches.pinning.validate:check_pins",
)

PINNED_TACTICS = Feature(
    name=fi.PINNED_TACTICS,
    summary=(
        "FlashInfer's low-latency MXFP8 tuner is offered only the pinned tactic per shape and rows"
    ),
    requires=(fi.FLASHINFER, CUTE_DSL),  # FlashInfer's CuTe DSL kernels
    devices=("sm_100", "sm_103", "sm_107"),
    self_check="fi_patches.pinning.validate:pinned_tactics",
    sections=("low_latency",),
    checker="fi_patches.pinning.validate:check_low_latency",
)

PINNED_CUTE_DSL = Feature(
    name=fi.PINNED_CUTE_DSL,
    summary="mm_mxfp8's cute-dsl runner runs (and tunes) a pinned tactic per shape and row range",
    requires=(fi.FLASHINFER, CUTE_DSL),  # FlashInfer's CuTe DSL kernels
    # sm_107 runs another cute-dsl kernel with another tactic form from 0.7.2 on.
    devices=("sm_100", "sm_103"),
    self_check="fi_patches.pinning.validate:pinned_cute_dsl",
    sections=("cute_dsl",),
    checker="fi_patches.pinning.validate:check_cute_dsl",
)

WIDE_TILE = Feature(
    name=fi.WIDE_TILE,
    summary="the low-latency MXFP8 GEMM with 16-128-row activation tiles, compiled by fi_patches",
    requires=(fi.FLASHINFER, CUTE_DSL),  # FlashInfer's CuTe DSL kernels
    devices=("sm_100", "sm_103"),
    self_check="fi_patches.pinning.validate:wide_tile",
    sections=("wide",),
    checker="fi_patches.pinning.validate:check_wide",
    compiled_check="fi_patches.pinning.validate:wide_tile_compiled",
)

PRESEED = Feature(
    name=fi.PRESEED,
    summary=(
        "pinned_tactics(mode='preseed') answers FlashInfer's cache lookups of pinned keys with "
        "the pin, so tuning a pinned key profiles nothing"
    ),
    requires=(fi.FLASHINFER,),
    devices=(),
    self_check="fi_patches.pinning.validate:preseed",
)

VLLM_PLUGIN = Feature(
    name=declared_in.VLLM_PLUGIN,
    summary="vLLM's general plugin activates fi_patches (FI_PATCHES_PINS) in every vLLM process",
    requires=(VLLM,),
    devices=declared_in.VLLM_PLUGIN_DEVICES,
    self_check="fi_patches.vllm.plugin:plugin_self_check",
)

VLLM_ROUTE = Feature(
    name=declared_in.VLLM_ROUTE,
    summary="vLLM's cute-dsl MXFP8 linears send their GEMM through fi_patches.mxfp8.mm",
    # fi_patches.mxfp8.mm's own routes gate their FlashInfer internals; FlashInfer's verified
    # range is the one the route's call of it is verified on.
    requires=(VLLM, fi.FLASHINFER),
    devices=declared_in.VLLM_ROUTE_DEVICES,
    self_check="fi_patches.vllm.route:route_self_check",
)

SGLANG_PLUGIN = Feature(
    name=declared_in.SGLANG_PLUGIN,
    summary=(
        "SGLang's general plugin activates fi_patches (FI_PATCHES_PINS) in every SGLang process"
    ),
    requires=(SGLANG,),
    devices=declared_in.SGLANG_PLUGIN_DEVICES,
    self_check="fi_patches.sglang.plugin:plugin_self_check",
)

FEATURES: tuple[Feature, ...] = (
    PINNED_OPS,
    PINNED_TACTICS,
    PINNED_CUTE_DSL,
    WIDE_TILE,
    PRESEED,
    VLLM_PLUGIN,
    VLLM_ROUTE,
    SGLANG_PLUGIN,
)


def feature(name: str) -> Feature:
    """The feature called ``name``; ``KeyError`` names the known ones otherwise."""
    for declared in FEATURES:
        if declared.name == name:
            return declared
    known = ", ".join(f.name for f in FEATURES)
    raise KeyError(f"no fi_patches feature {name!r} (known: {known})")


def feature_of_section(section: str) -> Feature:
    """The feature that applies pin-table ``section``."""
    for declared in FEATURES:
        if section in declared.sections:
            return declared
    raise KeyError(f"no fi_patches feature applies [[{section}]] pins")


def pinned_sections() -> tuple[str, ...]:
    """Every section a ``pinned_tactics()`` block applies, in feature order."""
    return tuple(s for f in FEATURES for s in f.sections)


# the installed packages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """An installed package: ``version`` is None when it is missing or unparsable."""

    present: bool
    version_text: str | None
    import_error: str | None

    @property
    def version(self) -> Version | None:
        return parse_version(self.version_text) if self.version_text else None

    @property
    def importable(self) -> bool:
        return self.present and self.import_error is None

    @property
    def label(self) -> str:
        """A short text for tables: the version, or why there is none."""
        if not self.present:
            return "not installed"
        return self.version_text or "unknown version"


_installed_lock = threading.RLock()
"""Re-entrant: importing FlashInfer here runs its post-import hooks (``fi_patches.auto``), which
ask for the installed FlashInfer again on this thread."""
_cached: dict[str, Installed] = {}


def _metadata_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _probe_package(dependency: Dependency) -> Installed:
    if importlib.util.find_spec(dependency.module) is None:
        return Installed(present=False, version_text=None, import_error=None)
    version_text = _metadata_version(dependency.distribution)
    try:
        module = importlib.import_module(dependency.module)
    except Exception as exc:  # any import-time failure disables its features, with this reason
        logger.debug("import %s failed: %s", dependency.module, error_text(exc))
        return Installed(present=True, version_text=version_text, import_error=error_text(exc))
    if version_text is None:
        version_text = getattr(module, "__version__", None)
    return Installed(present=True, version_text=version_text, import_error=None)


def installed(dependency: Dependency, refresh: bool = False) -> Installed:
    """``dependency`` as installed here, probed once per process (``refresh`` probes again)."""
    with _installed_lock:
        found = _cached.get(dependency.module)
        if found is None or refresh:
            found = _cached[dependency.module] = _probe_package(dependency)
        return found


def installed_flashinfer(refresh: bool = False) -> Installed:
    """The installed FlashInfer, probed once per process (``refresh`` probes again)."""
    return installed(FLASHINFER, refresh)


def flashinfer_unusable() -> str | None:
    """None where FlashInfer imports, else why not, as a clause for a CLI's one line."""
    found = installed_flashinfer()
    if not found.present:
        return "FlashInfer (flashinfer-python) is not installed here"
    if found.import_error is not None:
        return f"FlashInfer does not import here ({found.import_error})"
    return None


def forget_installed() -> None:
    """Probe every package again on next use."""
    with _installed_lock:
        _cached.clear()


# the verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    """One probe's outcome: ``reason`` is None when it passed; ``deprecated`` is upstream's
    deprecation message of an internal that passed (it still works, a release may remove it)."""

    probe: str
    reason: str | None
    deprecated: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class FeatureStatus:
    """One feature's state, as ``fi_patches.status()`` and ``doctor`` report it."""

    name: str
    enabled: bool
    reason: str
    flashinfer: str
    device: str
    verified: str
    probes: tuple[ProbeResult, ...] = field(default=())
    pins: str = ""
    in_matrix: bool = False
    """Whether every release it was judged on is one a compat matrix cell ran (an enabled
    feature can be off the matrix: a release inside the range that no cell ran)."""
    cute_dsl: str = "-"
    """The installed CuTe DSL (``nvidia-cutlass-dsl``) release, for a feature that needs it;
    ``-`` for one that does not."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["probes"] = [
            {"probe": p.probe, "ok": p.ok, "reason": p.reason, "deprecated": p.deprecated}
            for p in self.probes
        ]
        return data


def _devices_text(devices: tuple[str, ...]) -> str:
    if len(devices) == 1:
        return devices[0]
    return ", ".join(devices[:-1]) + f" or {devices[-1]}"


def _probe(internal: Declared, version: Any, verify: bool = True) -> ProbeResult:
    """One internal's probe: a ``since`` internal is not needed before its release, and an
    optional one may be absent (its users then take their documented fallback)."""
    if internal.since is not None and version is not None and version < internal.since:
        return ProbeResult(internal.path, None)
    if internal.optional:
        try:
            internal.resolve()
        except InternalError:
            return ProbeResult(internal.path, None)
    problem = internal.probe(verify)
    return ProbeResult(internal.path, problem, internal.deprecation() if problem is None else None)


def _deprecations(probes: tuple[ProbeResult, ...]) -> str:
    """A warning clause naming the passing internals upstream marks deprecated ('' if none)."""
    old = [p for p in probes if p.deprecated]
    if not old:
        return ""
    names = ", ".join(p.probe for p in old)
    return (
        f" Warning: upstream marks {len(old)} internal(s) it uses deprecated, still working: "
        f"{names} ({old[0].deprecated})."
    )


def _owner(internal: Declared, feature: Feature) -> Dependency:
    """The dependency an internal belongs to: the one whose module its path starts with (the
    CuTe DSL's for ``cutlass``), else the feature's main package."""
    path = internal.path.split(" or ")[0]
    for dependency in feature.requires:
        if path.split(".")[0] == dependency.module:
            return dependency
    return feature.requires[0]


@dataclass(frozen=True)
class _Checked:
    """A dependency's verdict: the problem (None when fine), its probes, whether it is
    enabled only through ``FI_PATCHES_ALLOW_UNVERIFIED``, and whether its release is one a
    compat matrix cell ran."""

    problem: str | None
    probes: tuple[ProbeResult, ...]
    version: Version | None
    unverified: bool = False
    in_matrix: bool = False


def check_dependency(feature: Feature, dependency: Dependency) -> _Checked:
    """Whether ``dependency`` is installed, imports, has every internal ``feature`` needs from
    it, and is a verified release (or allowed unverified); nothing here asks for a device."""
    found = installed(dependency)
    name = dependency.label
    if not found.present:
        return _Checked(f"{name} ({dependency.distribution}) is not installed.", (), None)
    if found.import_error is not None:
        problem = (
            f"import {dependency.module} failed ({found.import_error}), so every patch is off."
        )
        return _Checked(problem, (), None)
    version = found.version
    if version is None:
        return _Checked(
            f"{name}'s version {found.version_text!r} is not a PEP 440 version.", (), None
        )
    needed = [i for i in feature.internals() if _owner(i, feature) is dependency]
    listed = is_verified(version, dependency.verified) and is_listed(version, dependency.releases)
    verify = _verifying or not listed
    probes = tuple(_probe(internal, version, verify) for internal in needed)
    failed = [p for p in probes if not p.ok]
    if failed:
        extra = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        problem = f"{name} {version} lacks an internal it needs: {failed[0].reason}{extra}."
        return _Checked(problem, probes, version)
    if is_verified(version, dependency.verified):
        return _Checked(None, probes, version, in_matrix=is_listed(version, dependency.releases))
    where = "newer than" if is_newer_than(version, dependency.verified) else "outside"
    if where == "newer than" and _env.flag(_env.ALLOW_UNVERIFIED):
        return _Checked(None, probes, version, unverified=True)
    hint = f"; set {_env.ALLOW_UNVERIFIED.name}=1 to enable it" if where == "newer than" else ""
    problem = (
        f"{name} {version} is {where} the verified range {dependency.verified} "
        f"(all {len(probes)} probes pass{hint})."
    )
    return _Checked(problem, probes, version)


NO_DEVICE = Device(None, "none", "no particular device needed")
"""What the self-check of a feature that needs no device is given."""


def _self_check(
    feature: Feature, device: Device, probes: tuple[ProbeResult, ...], verify: bool
) -> str | None:
    """The feature's cheap self-check, run here every time, then (where ``verify``) its
    compiled check (if any), whose outcome an earlier process may have kept; None when they
    pass."""
    failure = feature.load_self_check()(device)
    if failure is not None or not feature.compiled_check or not verify:
        return failure
    from fi_patches.compat import selfcheck_cache

    return selfcheck_cache.outcome(
        feature.name,
        feature.compiled_check,
        device,
        probes,
        lambda: feature.load_compiled_check()(device),
        modules_of(feature.name),
    )


def evaluate(feature: Feature, device: Device | None) -> FeatureStatus:
    """The state of ``feature`` given the installed packages and the device (None for a feature
    that needs no particular device); no caching."""
    patched = [d for d in feature.requires if d.module == FLASHINFER.module]
    flashinfer = installed(patched[0]).label if patched else "-"
    dsl = installed(CUTE_DSL).label if CUTE_DSL in feature.requires else "-"
    others = [d for d in feature.requires if d not in patched]
    verified = "; ".join(
        [str(d.verified) for d in patched] + [f"{d.distribution}{d.verified}" for d in others]
    )

    verdicts: list[tuple[Dependency, _Checked]] = []

    def result(enabled: bool, reason: str, probes: tuple[ProbeResult, ...] = ()) -> FeatureStatus:
        listed = len(verdicts) == len(feature.requires) and all(c.in_matrix for _, c in verdicts)
        return FeatureStatus(
            name=feature.name,
            enabled=enabled,
            reason=reason,
            flashinfer=flashinfer,
            device=device.label if device is not None else "any",
            verified=verified,
            probes=probes,
            in_matrix=listed,
            cute_dsl=dsl,
        )

    probes: tuple[ProbeResult, ...] = ()
    for dependency in feature.requires:
        checked = check_dependency(feature, dependency)
        probes += checked.probes
        if checked.problem is not None:
            return result(False, checked.problem, probes)
        verdicts.append((dependency, checked))
    if device is not None:
        if device.arch is None:
            return result(
                False,
                f"needs {_devices_text(feature.devices)}, but {device.absence} "
                f"({_env.DEVICE.name}=sm_103 validates offline).",
                probes,
            )
        if device.arch not in feature.devices:
            return result(
                False,
                f"needs {_devices_text(feature.devices)}; this device is {device.arch}.",
                probes,
            )
    releases = " and ".join(f"{d.label} {c.version}" for d, c in verdicts)
    in_matrix = all(c.in_matrix for _, c in verdicts)
    verify = _verifying or not in_matrix
    try:
        failure = _self_check(feature, device or NO_DEVICE, probes, verify)
    except Exception as exc:
        failure = f"the self-check raised {error_text(exc)}"
    if failure is not None:
        return result(False, f"self-check failed on {releases}: {failure}", probes)
    unverified = [(d, c) for d, c in verdicts if c.unverified]
    if unverified:
        what = "; ".join(
            f"{d.label} {c.version} is unverified (verified: {d.verified})" for d, c in unverified
        )
        reason = (
            f"{what}; enabled by {_env.ALLOW_UNVERIFIED.name}=1 because all {len(probes)} "
            "probes and the self-check pass."
        )
    elif in_matrix:
        are = "is" if len(verdicts) == 1 else "are"
        reason = f"{releases} {are} verified; {len(probes)} probes and the self-check pass."
    else:
        off = "; ".join(_off_matrix(d, c) for d, c in verdicts if not c.in_matrix)
        reason = f"{off}; {len(probes)} probes and the self-check pass."
    if verify and not _verifying and _verifications(feature):
        reason += (
            f" Off the compat matrix, this process also ran {_verifications(feature)}, which a "
            "serving process on a release the matrix ran takes from the matrix's verdict."
        )
    return result(True, reason + _deprecations(probes), probes)


def _verifications(feature: Feature) -> str:
    """The verification steps ``feature`` has, as a phrase ('' where it has none)."""
    steps = []
    if any(i.verification for i in feature.internals()):
        steps.append("the round trip of FlashInfer's tuner-cache writers")
    if feature.compiled_check:
        steps.append("the compiled self-check")
    return " and ".join(steps)


def _off_matrix(dependency: Dependency, checked: _Checked) -> str:
    """Why a release inside the verified range is not verified: no matrix cell ran it."""
    below, above = (None, None)
    if checked.version is not None:
        below, above = neighbours(checked.version, dependency.releases)
    if below and above:
        where = f"between verified {below} and {above}"
    elif below or above:
        where = f"{'after' if below else 'before'} verified {below or above}"
    else:
        where = f"no release of {dependency.label} is verified"
    return f"{dependency.label} {checked.version} is not in the compat matrix; {where}"


_lock = threading.RLock()
_cache: dict[str, FeatureStatus] = {}
_verifying = False
"""Whether this process runs the verification steps on every release (:func:`verify_fully`)."""


def verify_fully() -> None:
    """Run the verification steps (the tuner-cache writers' round trip, the compiled self-check)
    on every release from now on, as the CLI and the tests do, not only on releases no compat
    matrix cell ran; verdicts reached without them are judged again."""
    global _verifying
    with _lock:
        if _verifying:
            return
        _verifying = True
        stale = bool(_cache)
    if stale:
        refresh()


def status_of(name: str) -> FeatureStatus:
    """The state of the feature ``name``, evaluated once per process (see :func:`refresh`)."""
    with _lock:
        cached = _cache.get(name)
        if cached is None:
            declared = feature(name)
            cached = evaluate(declared, current_device() if declared.devices else None)
            _cache[name] = cached
            level = logging.INFO if cached.enabled else logging.DEBUG
            logger.log(level, "feature %s: %s", name, cached.reason)
        return cached


_forgetters: list[Callable[[], None]] = []


def on_refresh(forget: Callable[[], None]) -> Callable[[], None]:
    """Register ``forget`` (a cache's reset) to run at every :func:`refresh`; returns it, so it
    can decorate the function."""
    _forgetters.append(forget)
    return forget


def refresh() -> None:
    """Forget every verdict and every cache that depends on one, so the next query probes the
    installed packages and the device again."""
    with _lock:
        _cache.clear()
        forget_installed()
    for forget in list(_forgetters):
        forget()
