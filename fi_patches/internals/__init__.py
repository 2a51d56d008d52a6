"""The boundary: every internal fi_patches uses from another package, declared once with the
probe that guards it and the features that need it (``tuner.py``: FlashInfer's tuner contract
and its caches' file forms, which pinning and recording any op need, and its tune group, which
the rank guard hooks; ``flashinfer.py``: the MXFP8 internals; ``cute_dsl.py``: the CuTe DSL's,
which the wide kernel and its FlashInfer base class use; ``vllm.py``; ``sglang.py``), and what
FlashInfer's sources say (``catalog.py``: its runner classes and the op names it tunes). No other
module of fi_patches imports FlashInfer or names one of its private members, and only the DSL
kernel module imports the DSL; ``tests/test_boundary.py`` checks that, and the drift suite
(``tests/drift/``) breaks each declared internal in turn.

Below, how an internal of another package is declared: where it lives, what shape it must have,
the features that need it, and the probe that guards it (its structure, then optionally a
behavioural check that calls it); then the names of those features. The drift suite derives
its fault-injection cases from these declarations, so an internal declared here is an internal
tested for drift."""

from __future__ import annotations

import importlib
import inspect
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_patches._text import error_text

Check = Callable[[Any], "str | None"]
"""A behavioural check: given the resolved object, None when it behaves as fi_patches needs,
else what is wrong, as a clause."""

MODULE, CLASS, CALLABLE, METHOD, FACTORY, ATTRIBUTE = (
    "module",
    "class",
    "callable",
    "method",
    "factory",
    "attribute",
)


class InternalError(RuntimeError):
    """An internal of FlashInfer (or vLLM) that fi_patches needs is missing or changed; the
    message names it. Features are disabled before this can escape to a caller; it reaches
    callers only of functions that need the internal directly (``from_tuner``, ``pinned_mm``)."""


def _nested_code(code: types.CodeType) -> list[types.CodeType]:
    found = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.append(const)
            found.extend(_nested_code(const))
    return found


@dataclass(frozen=True)
class Dependency:
    """A package fi_patches patches: its distribution (for the version), its import name, the
    range the features that need it are enabled in, and the exact releases verified there."""

    distribution: str
    module: str
    verified: SpecifierSet
    label: str
    """How reasons name it (``FlashInfer``)."""
    releases: tuple[str, ...] = ()
    """The releases a compat matrix cell ran (``tests/test_verified_releases.py`` holds this
    list and ``compat/matrix.toml`` to each other); another release inside ``verified`` is
    enabled only with a reason saying no cell ran it."""

    def installed(self) -> bool:
        """Whether the package can be imported here at all (found, not imported)."""
        import importlib.util

        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False


@dataclass(frozen=True)
class Internal:
    """One internal: ``module`` (and ``attr``, a dotted path inside it; empty for the module
    itself) of kind ``kind``, needed by ``features``.

    ``params`` are a callable's leading parameters (``self`` not listed for methods);
    ``builds``/``methods`` name the class a factory defines in its body, which is how FlashInfer
    binds its CuTe DSL runners; ``check`` exercises the object; an ``optional`` internal may be
    absent (older releases), and then its users take their documented fallback; one with
    ``since`` is needed only from that release on. A path part ending in ``()`` is called (a
    singleton's ``get()``), so instance attributes can be declared too. A ``verification``
    check (it writes files or reads compiled code) runs where a release is verified, not in a
    serving process on a release the compat matrix ran (``probe(verify=False)``).
    """

    key: str
    kind: str
    module: str
    attr: str = ""
    features: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    builds: str = ""
    methods: tuple[str, ...] = ()
    check: Check | None = field(default=None, compare=False)
    optional: bool = False
    since: Version | None = None
    verification: bool = False

    @property
    def path(self) -> str:
        """The dotted path, as reasons name it."""
        return f"{self.module}.{self.attr}" if self.attr else self.module

    @property
    def name(self) -> str:
        """The last part of the path: the attribute's own name."""
        return self.attr.rpartition(".")[2] if self.attr else self.module.rpartition(".")[2]

    def resolve(self) -> Any:
        """The object, imported now; :class:`InternalError` naming it when it is missing."""
        try:
            obj: Any = importlib.import_module(self.module)
            for part in self.attr.split(".") if self.attr else ():
                obj = getattr(obj, part[:-2])() if part.endswith("()") else getattr(obj, part)
        except Exception as exc:
            what = "is not importable" if self.kind == MODULE else "is missing"
            raise InternalError(f"{self.path} {what} ({error_text(exc)})") from exc
        return obj

    def present(self) -> bool:
        """Whether the internal resolves (for optional internals)."""
        try:
            self.resolve()
        except InternalError:
            return False
        return True

    def probe(self, verify: bool = True) -> str | None:
        """None when the internal is there with the declared shape and behaviour, else the
        reason, a clause that names it; ``verify=False`` skips a ``verification`` check."""
        try:
            obj = self.resolve()
        except InternalError as exc:
            return str(exc)
        problem = self._structure(obj)
        if problem is None and self.check is not None and (verify or not self.verification):
            try:
                with warnings.catch_warnings():  # a deprecated one is reported, not raised
                    warnings.simplefilter("ignore", DeprecationWarning)
                    problem = self.check(obj)
            except Exception as exc:
                problem = f"checking it raised {error_text(exc)}"
            if problem is not None:
                problem = f"{self.path} misbehaves: {problem}"
        return problem

    def deprecation(self) -> str | None:
        """The upstream deprecation message of the object (``typing_extensions.deprecated``
        sets ``__deprecated__``), or None: it still works, but a release may remove it."""
        try:
            message = getattr(self.resolve(), "__deprecated__", None)
        except InternalError:
            return None
        return str(message) if message else None

    def _structure(self, obj: Any) -> str | None:
        if self.kind == CLASS and not isinstance(obj, type):
            return f"{self.path} is not a class (it is {type(obj).__name__})"
        if self.kind in (CALLABLE, METHOD, FACTORY) and not callable(obj):
            return f"{self.path} is not callable (it is {type(obj).__name__})"
        if self.params:
            problem = self._signature(obj)
            if problem:
                return problem
        if self.builds:
            return self._factory_class(obj)
        return None

    def _signature(self, obj: Any) -> str | None:
        try:
            signature = inspect.signature(inspect.unwrap(obj))
        except (TypeError, ValueError) as exc:
            return f"{self.path} has no readable signature ({error_text(exc)})"
        names = [p.name for p in signature.parameters.values()]
        if self.kind == METHOD and names and names[0] in ("self", "cls"):
            names = names[1:]
        if tuple(names[: len(self.params)]) != self.params:
            return (
                f"{self.path} changed signature: expected ({', '.join(self.params)}, ...), "
                f"found ({', '.join(names)})"
            )
        return None

    def _factory_class(self, obj: Any) -> str | None:
        code = getattr(inspect.unwrap(obj), "__code__", None)
        if code is None:
            return f"{self.path} is not a Python function"
        bodies = [c for c in _nested_code(code) if c.co_name == self.builds]
        if not bodies:
            return (
                f"{self.path} no longer defines class {self.builds} "
                "(FlashInfer changed how it binds this runner)"
            )
        defined = {c.co_name for body in bodies for c in _nested_code(body)}
        missing = [m for m in self.methods if m not in defined]
        if missing:
            return f"class {self.builds} in {self.path} no longer defines {', '.join(missing)}"
        return None


@dataclass(frozen=True)
class OneOf:
    """An internal that moved between releases: the first of ``options`` that resolves serves.
    Its probe passes when any option passes."""

    key: str
    options: tuple[Internal, ...]
    features: tuple[str, ...] = ()
    optional: bool = False
    since: Version | None = None

    @property
    def kind(self) -> str:
        return self.options[0].kind

    @property
    def path(self) -> str:
        return " or ".join(o.path for o in self.options)

    def resolve(self) -> Any:
        problems = []
        for option in self.options:
            try:
                return option.resolve()
            except InternalError as exc:
                problems.append(str(exc))
        raise InternalError("none of " + "; ".join(problems))

    def resolved_option(self) -> Internal:
        """The option that serves here; :class:`InternalError` when none does."""
        for option in self.options:
            if option.present():
                return option
        raise InternalError(f"none of {self.path} is there")

    def deprecation(self) -> str | None:
        """The serving option's upstream deprecation message, or None."""
        try:
            return self.resolved_option().deprecation()
        except InternalError:
            return None

    @property
    def verification(self) -> bool:
        return any(o.verification for o in self.options)

    def probe(self, verify: bool = True) -> str | None:
        problems = []
        for option in self.options:
            problem = option.probe(verify)
            if problem is None:
                return None
            problems.append(problem)
        return "none of " + "; ".join(problems)


Declared = Internal | OneOf


# the features FlashInfer's internals are declared for (named here, so the boundary's modules
# name them without importing each other) ----------

PINNED_OPS = "pinned_ops"
"""``[[pin]]`` entries: any op FlashInfer tunes, by its tuner key."""

PINNED_TACTICS = "pinned_tactics"
PINNED_CUTE_DSL = "pinned_cute_dsl"
WIDE_TILE = "wide_tile"
PRESEED = "preseed"

ENGINE = (PINNED_OPS, PINNED_TACTICS, PINNED_CUTE_DSL, WIDE_TILE, PRESEED)
"""Every feature whose pins go through fi_patches' wrappers of FlashInfer's tuner."""


VLLM_PLUGIN, VLLM_ROUTE = "vllm_plugin", "vllm_route"
SGLANG_PLUGIN = "sglang_plugin"

# the packages fi_patches patches and where their features run (declared here, so that
# declaring every feature, :mod:`fi_patches.compat.features`, loads none of their internals: a
# process that evaluates only the pinning features never imports ``vllm.py``, ``sglang.py`` or
# ``cute_dsl.py``; each of those modules re-exports its own) ----------

FLASHINFER = Dependency(
    distribution="flashinfer-python",
    module="flashinfer",
    verified=SpecifierSet(">=0.7.0,<=0.7.4"),
    label="FlashInfer",
    releases=("0.7.0", "0.7.1", "0.7.2", "0.7.2.post1", "0.7.4"),
)
"""FlashInfer: the range every feature is enabled in (prerelease-aware: 0.7.5rc1 and
0.7.4.post1 are not 0.7.4) and the releases the compat matrix ran with its features on (0.7.3
and 0.7.0.post1, which no cell imports, are in the range but not verified)."""

CUTE_DSL_DISTRIBUTION = "nvidia-cutlass-dsl"

CUTE_DSL = Dependency(
    distribution=CUTE_DSL_DISTRIBUTION,
    module="cutlass",
    verified=SpecifierSet(">=4.8.0"),
    label="CuTe DSL",
    releases=("4.8.0", "4.8.1"),
)
"""The CuTe DSL: the range FlashInfer's releases require (``nvidia-cutlass-dsl>=4.8.0``; a newer
DSL is inside it) and the releases the compat matrix's DSL cells ran. Another release inside the
range is enabled only with a reason saying no cell ran it."""

VLLM = Dependency(
    distribution="vllm",
    module="vllm",
    verified=SpecifierSet("==0.34.0"),
    label="vLLM",
    releases=("0.34.0",),  # what ``nox -s vllm`` installs
)
"""vLLM, and the releases the integration is verified on (prerelease-aware, as FlashInfer's)."""

VLLM_PLUGIN_DEVICES: tuple[str, ...] = ()
"""The plugin runs on any device: it only arms fi_patches, whose features gate themselves."""

VLLM_ROUTE_DEVICES = ("sm_100", "sm_103")
"""Where vLLM picks this kernel (the sm_10x family) and fi_patches' routes run."""

SGLANG = Dependency(
    distribution="sglang",
    module="sglang",
    verified=SpecifierSet("==0.5.23"),
    label="SGLang",
    releases=("0.5.23",),  # what ``nox -s sglang`` installs
)
"""SGLang, and the releases the plugin is verified on (prerelease-aware, as FlashInfer's)."""

SGLANG_PLUGIN_DEVICES: tuple[str, ...] = ()
"""The plugin runs on any device: it only arms fi_patches, whose features gate themselves."""

# where the internals are declared ----------

DECLARING: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("tuner", None),
    ("flashinfer", None),
    ("cute_dsl", (PINNED_TACTICS, PINNED_CUTE_DSL, WIDE_TILE)),
    ("vllm", (VLLM_PLUGIN, VLLM_ROUTE)),
    ("sglang", (SGLANG_PLUGIN,)),
)
"""The boundary's modules that declare internals (their ``INTERNALS``), in declaration order,
each with the only features it declares internals for (None: any). :func:`needed_by` reads only
a feature's own modules; ``tests/test_boundary.py`` checks no module declares for another."""


def declared(modules: tuple[str, ...] | None = None) -> tuple[Declared, ...]:
    """Every declared internal, of every dependency (declarations import nothing heavy); with
    ``modules``, only those of the boundary's modules named there."""
    found: list[Declared] = []
    for name, _ in DECLARING:
        if modules is None or name in modules:
            found.extend(importlib.import_module(f"{__name__}.{name}").INTERNALS)
    return tuple(found)


def absence(internal: Declared) -> str:
    """Why ``internal`` does not resolve here, as a clause: its package is not installed
    (``vLLM is not installed``), else the path that is not there in this release."""
    module = (internal.options[0] if isinstance(internal, OneOf) else internal).module
    top = module.partition(".")[0]
    for dependency in (FLASHINFER, CUTE_DSL, VLLM, SGLANG):
        if dependency.module == top and not dependency.installed():
            return f"{dependency.label} is not installed here, so {internal.path} is not there"
    if isinstance(internal, OneOf):
        return f"none of {internal.path} is there"
    return f"{internal.path} is not there"


def needed_by(feature: str) -> tuple[Declared, ...]:
    """The internals ``feature`` declares it needs, in declaration order (reading only the
    modules that may declare internals for it)."""
    modules = tuple(name for name, only in DECLARING if only is None or feature in only)
    return tuple(i for i in declared(modules) if feature in i.features)


def modules_of(feature: str) -> tuple[str, ...]:
    """The modules of every internal ``feature`` needs (each option of a ``OneOf``), sorted: the
    source files a cached self-check outcome of it is keyed by."""
    found: set[str] = set()
    for internal in needed_by(feature):
        options = internal.options if isinstance(internal, OneOf) else (internal,)
        found.update(option.module for option in options)
    return tuple(sorted(found))
