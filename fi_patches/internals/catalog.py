"""Which custom ops and runner classes the installed FlashInfer still has, read from its sources,
for checking ``[[pin]]`` entries across an upgrade without running any op.

FlashInfer builds most runner classes inside factory functions, so a class exists as an object
only after its op first runs; its definition is in the source from the start. A runner class is
known when a live ``TunableRunner`` subclass has its name or a FlashInfer source file defines
it; an op is known when a source file that tunes ops spells its name, or when the name matches
one FlashInfer builds at run time (an f-string or a helper's return value reaching
``choose_one``: :mod:`fi_patches.internals.op_names`). Read once per process; the run-time
names are read only when an op is not spelled as a literal.

It also says which names are *close* to FlashInfer's (a misspelt ``[[pin]]`` runner or op is
refused at load) and the form of a runner's tactics where FlashInfer's sources bound it
(:data:`TACTIC_RANGES`), all without importing a FlashInfer module or building a runner.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fi_patches._logging import get_logger
from fi_patches.internals import op_names

logger = get_logger(__name__)

_CLASS = re.compile(rb"^([ \t]*)class[ \t]+(\w+)[ \t]*([(:])", re.M)
_RUNNER = b"Runner"
"""A runner class's name or one of its bases holds this (``TunableRunner``, ``MoERunner``)."""
_BASES_MAX = 400
_LITERAL = re.compile(rb"""["']([\w:.\-]{1,200})["']""")
_TUNING = (b"TunableRunner", b"choose_one")
_TUNES = b"choose_one"
_lock = threading.Lock()


def typos_allowed(name: str) -> int:
    """How many typos (a letter added, dropped, changed, or two swapped; case ignored) a name
    may hold and still be taken for a misspelling of one of FlashInfer's: one under 20
    characters, two from 20. ``CublasLtBf16GemmRunner`` misspells ``CublasltBf16GemmRunner``
    (case only) and ``bf16_gem`` ``bf16_gemm``; a consumer's ``Runner0`` (``_Runner``: two) or
    ``ToyGemmRunner`` (``TGVGemmRunner``: two) is its own."""
    return 1 if len(name) < 20 else 2


@dataclass(frozen=True)
class TacticRange:
    """Runners whose tactics are ``range(count)``, ``count`` at most a constant of a FlashInfer
    module (read from its source): a pinned tactic is an integer ``0 .. constant - 1``."""

    runners: tuple[str, ...]
    file: str
    """The module's file, relative to the ``flashinfer`` package."""
    constant: str
    what: str
    """What the runner lists (for messages)."""


TACTIC_RANGES = (
    TacticRange(
        ("CublasltBf16GemmRunner", "CublasFp8GemmRunner"),
        "gemm/gemm_base.py",
        "_CUBLASLT_MAX_ALGOS",
        "index the algos cuBLASLt lists for the problem",
    ),
)
"""The runners whose tactic bounds FlashInfer's sources declare. Every other runner's tactics
are known only to the runner, for real inputs (checked when the tuner first lists a key)."""


@dataclass(frozen=True)
class TacticBound:
    """A runner's tactics are integers ``0 .. count - 1``; ``source`` says where ``count`` is."""

    count: int
    source: str
    what: str


@dataclass(frozen=True)
class Defined:
    """Where FlashInfer's sources define a class: the file (relative to the package's parent)
    and whether the definition is nested in a function (a factory builds the class per call)."""

    file: str
    nested: bool


class Catalog:
    """Class names and string literals of FlashInfer's source files that tune ops."""

    def __init__(
        self,
        classes: frozenset[str],
        literals: frozenset[str],
        files: int,
        defined: dict[str, Defined] | None = None,
        tuning: tuple[Path, ...] = (),
        runners: frozenset[str] = frozenset(),
        bounds: dict[str, TacticBound] | None = None,
    ) -> None:
        self.classes = classes
        self.runners = runners
        """The classes that are runners: named ``...Runner`` or deriving from a ``...Runner``."""
        self.bounds = bounds or {}
        """Per runner class, the bound of its tactics where the sources declare one."""
        self.literals = literals
        self.files = files
        self.defined = defined or {}
        """Where each class is defined (its first definition)."""
        self._tuning = tuning
        self._patterns: tuple[re.Pattern[str], ...] | None = None
        self._plain: tuple[str, ...] = ()
        self._patterns_lock = threading.Lock()

    def runner_known(self, name: str) -> bool:
        if name in self.classes:
            return True
        from fi_patches.internals import tuner as fi_tuner
        from fi_patches.patching import all_subclasses

        return any(cls.__name__ == name for cls in all_subclasses(fi_tuner.tunable_runner()))

    def close_runner(self, name: str) -> str | None:
        """The runner class of FlashInfer (or of this process) that ``name`` misspells, or None
        when it is like none of them (a consumer's own runner, perhaps defined later)."""
        from fi_patches.internals import tuner as fi_tuner
        from fi_patches.patching import all_subclasses

        live = {cls.__name__ for cls in all_subclasses(fi_tuner.tunable_runner())}
        return close_name(name, self.runners | live)

    def close_op(self, op: str) -> str | None:
        """The op FlashInfer tunes under a name ``op`` misspells, or None when it is like none
        of the names its sources spell (an op of the consumer's own)."""
        self.built_names()
        return close_name(op, self._plain)

    def op_known(self, op: str) -> bool:
        """Whether FlashInfer tunes an op called ``op``: a literal of its sources, or a name
        matching one it builds at run time."""
        if op in self.literals:
            return True
        return any(p.fullmatch(op) for p in self.built_names())

    def built_names(self) -> tuple[re.Pattern[str], ...]:
        """The patterns of the op names FlashInfer builds at run time (read on first use)."""
        with self._patterns_lock:
            if self._patterns is None:
                sources = []
                for path in self._tuning:
                    try:
                        sources.append(path.read_bytes())
                    except OSError:
                        continue
                found = op_names.read(sources)
                self._patterns = tuple(op_names.compile_pattern(p) for p in sorted(found))
                self._plain = tuple(sorted(p[0] for p in found if len(p) == 1))
                logger.debug("catalog: %d run-time op name patterns", len(found))
            return self._patterns


def close_name(name: str, known: Iterable[str]) -> str | None:
    """The name of ``known`` that ``name`` is taken to misspell (:func:`typos_allowed`), or
    None; a name of ``known`` is not a misspelling of itself."""
    if len(name) > 200:
        return None
    lowered = name.lower()
    limit = typos_allowed(name)
    best: tuple[int, str] | None = None
    for candidate in sorted(known):
        if candidate == name or abs(len(candidate) - len(name)) > limit:
            continue
        typos = _typos(lowered, candidate.lower(), limit)
        if typos <= limit and (best is None or typos < best[0]):
            best = (typos, candidate)
    return best[1] if best else None


def _typos(a: str, b: str, limit: int) -> int:
    """The optimal-string-alignment distance of ``a`` and ``b`` (insertions, deletions,
    substitutions, adjacent swaps), or ``limit + 1`` once it exceeds ``limit``."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        if min(current) > limit:
            return limit + 1
        previous2, previous = previous, current
    return previous[-1]


def _bounds(path: Path, data: bytes, package: Path) -> dict[str, TacticBound]:
    """The tactic bounds :data:`TACTIC_RANGES` declares in the module at ``path``."""
    found: dict[str, TacticBound] = {}
    where = path.relative_to(package).as_posix()
    for declared in TACTIC_RANGES:
        if declared.file != where:
            continue
        m = re.search(
            rb"^" + re.escape(declared.constant.encode()) + rb"\s*=\s*(\d{1,6})\s*$", data, re.M
        )
        if m is None:
            continue
        bound = TacticBound(
            int(m.group(1)),
            f"{declared.constant} = {int(m.group(1))} (flashinfer/{where})",
            declared.what,
        )
        found.update(dict.fromkeys(declared.runners, bound))
    return found


def _is_runner(name: str, data: bytes, m: re.Match[bytes]) -> bool:
    """Whether the class matched by ``m`` is named ``...Runner`` or derives from one."""
    if name.endswith("Runner"):
        return True
    if m.group(3) != b"(":
        return False
    end = data.find(b")", m.end(), m.end() + _BASES_MAX)
    return end >= 0 and _RUNNER in data[m.end() : end]


@functools.lru_cache(maxsize=4)
def _scan(root: str) -> Catalog:
    classes: set[str] = set()
    runners: set[str] = set()
    bounds: dict[str, TacticBound] = {}
    literals: set[str] = set()
    defined: dict[str, Defined] = {}
    tuning: list[Path] = []
    files = 0
    base = Path(root).parent
    for path in sorted(Path(root).rglob("*.py")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not any(marker in data for marker in _TUNING):
            continue
        files += 1
        if _TUNES in data:
            tuning.append(path)
        where = str(path.relative_to(base))
        bounds.update(_bounds(path, data, Path(root)))
        for m in _CLASS.finditer(data):
            name = m.group(2).decode()
            classes.add(name)
            if _is_runner(name, data, m):
                runners.add(name)
            defined.setdefault(name, Defined(where, bool(m.group(1))))
        literals.update(m.group(1).decode() for m in _LITERAL.finditer(data))
    logger.debug("catalog of %s: %d files, %d classes", root, files, len(classes))
    return Catalog(
        frozenset(classes),
        frozenset(literals),
        files,
        defined,
        tuple(tuning),
        frozenset(runners),
        bounds,
    )


def catalog_of(root: str | Path) -> Catalog:
    """The catalog of the package whose sources are under ``root`` (read once per root)."""
    with _lock:
        return _scan(str(root))


def catalog() -> Catalog | None:
    """The installed FlashInfer's catalog, or None where its sources cannot be found."""
    import importlib.util

    from fi_patches.internals.flashinfer import FLASHINFER

    spec = importlib.util.find_spec(FLASHINFER.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return catalog_of(next(iter(spec.submodule_search_locations)))
