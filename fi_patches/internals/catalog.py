"""Which custom ops and runner classes the installed FlashInfer still has, read from its sources,
for checking ``[[pin]]`` entries across an upgrade without running any op.

FlashInfer builds most runner classes inside factory functions, so a class exists as an object
only after its op first runs; its definition is in the source from the start. A runner class is
known when a live ``TunableRunner`` subclass has its name or a FlashInfer source file defines
it; an op is known when a source file that tunes ops spells its name, or when the name matches
one FlashInfer builds at run time (an f-string or a helper's return value reaching
``choose_one``: the second part of this module). Read once per process; the run-time names
are read only when an op of a FlashInfer runner is not spelled as a literal.

It also says which names are *close* to FlashInfer's (a misspelt ``[[pin]]`` runner or op is
refused at load) and the form of a runner's tactics where FlashInfer's sources bound it
(:data:`TACTIC_RANGES`), all without importing a FlashInfer module or building a runner.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fi_patches._logging import get_logger
from fi_patches.internals import FLASHINFER

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
                found = read_op_names(sources)
                self._patterns = tuple(compile_pattern(p) for p in sorted(found))
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

    spec = importlib.util.find_spec(FLASHINFER.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return catalog_of(next(iter(spec.submodule_search_locations)))


# the op names FlashInfer builds at run time -------------------------------------------------------
#
# The op names FlashInfer builds at run time, read from its sources as patterns.
#
# Most ops are tuned under a string literal, but some names are made per call: an f-string
# (``f"{dtype_str}_tgv_gemm"``) or a helper's return value (``_sm120_linear_op_name(...)``).
# This follows what reaches ``choose_one``'s first argument back through assignments, parameters
# (their call sites), helper functions' returns and f-strings, and keeps each name as a pattern of
# literal text and holes. A hole the sources bound (a local assigned ``"bf16"`` or ``"fp16"``)
# becomes those values; an ``int(...)`` an integer; anything else any text. A name with no literal
# text at all (an op named by a value the sources never spell) yields no pattern, so it never
# makes an arbitrary name known.

INT = "\x00int"
"""A hole holding an integer (``{int(x)}``, ``{len(x)}``)."""

ANY = "\x00any"
"""A hole holding any text the sources do not bound."""

Pattern = tuple[str, ...]
"""Literal text and holes (:data:`INT`, :data:`ANY`), in order."""

MAX_ALTERNATIVES = 64
"""Patterns kept per expression; more (a name built from many bounded parts) is one hole."""

MAX_DEPTH = 8
"""Assignments, parameters and helpers followed from one ``choose_one`` call."""

_HOLES = {INT: r"-?\d{1,20}", ANY: r"[^\n'\"]{1,200}?"}
_INT_CALLS = ("int", "len")
_TUNE = "choose_one"
_OP_PARAMETER = "custom_op"


@dataclass
class _Scope:
    """A function (or a module) of FlashInfer's sources: what it assigns to each name, its
    parameters, and the scope it is nested in."""

    node: ast.AST
    parent: _Scope | None
    assigned: dict[str, list[ast.expr]] = field(default_factory=dict)
    params: dict[str, tuple[int, ast.expr | None]] = field(default_factory=dict)
    """Name -> (position at a call site, default value)."""
    name: str = ""


class OpNames:
    """The patterns of the op names ``choose_one`` is called with in ``trees``."""

    def __init__(self, trees: Iterable[ast.Module]) -> None:
        self._functions: dict[str, list[_Scope]] = {}
        self._calls: dict[str, list[tuple[ast.Call, _Scope]]] = {}
        self._tuned: list[tuple[ast.expr, _Scope]] = []
        for tree in trees:
            self._index(tree, _Scope(tree, None))

    # indexing --------------------------------------------------------------------------------

    def _index(self, node: ast.AST, scope: _Scope) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = _Scope(child, scope, name=child.name)
                self._parameters(child, inner, method=isinstance(node, ast.ClassDef))
                self._functions.setdefault(child.name, []).append(inner)
                self._index(child, inner)
                continue
            if isinstance(child, ast.Assign):
                for target in child.targets:
                    if isinstance(target, ast.Name):
                        scope.assigned.setdefault(target.id, []).append(child.value)
            elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                if child.value is not None:
                    scope.assigned.setdefault(child.target.id, []).append(child.value)
            elif isinstance(child, ast.Call):
                self._call(child, scope)
            self._index(child, scope)

    @staticmethod
    def _parameters(
        fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: _Scope, method: bool
    ) -> None:
        positional = [*fn.args.posonlyargs, *fn.args.args]
        offset = 1 if method and positional and positional[0].arg in ("self", "cls") else 0
        defaults = [None] * (len(positional) - len(fn.args.defaults)) + list(fn.args.defaults)
        for index, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
            scope.params[arg.arg] = (index - offset, default)
        for arg, default in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
            scope.params[arg.arg] = (-1, default)

    def _call(self, call: ast.Call, scope: _Scope) -> None:
        name = _called(call)
        if not name:
            return
        self._calls.setdefault(name, []).append((call, scope))
        if name == _TUNE:
            op = call.args[0] if call.args else _keyword(call, _OP_PARAMETER)
            if op is not None:
                self._tuned.append((op, scope))

    # patterns --------------------------------------------------------------------------------

    def patterns(self) -> frozenset[Pattern]:
        """Every op name pattern with some literal text (plain literals included)."""
        found: set[Pattern] = set()
        for op, scope in self._tuned:
            for pattern in self._of(op, scope, 0) or ():
                if any(not _is_hole(part) for part in pattern):
                    found.add(pattern)
        return frozenset(found)

    def _of(self, expr: ast.expr, scope: _Scope, depth: int) -> set[Pattern] | None:
        """The patterns ``expr`` can evaluate to, or None when the sources do not bound it."""
        if depth > MAX_DEPTH:
            return None
        found: set[Pattern] | None
        if isinstance(expr, ast.Constant) and isinstance(expr.value, (str, int)):
            found = {(str(expr.value),)}
        elif isinstance(expr, ast.JoinedStr):
            found = {()}
            for part in expr.values:
                if isinstance(part, ast.Constant):
                    pieces: set[Pattern] | None = {(str(part.value),)}
                elif isinstance(part, ast.FormattedValue) and part.format_spec is None:
                    pieces = self._of(part.value, scope, depth + 1)
                else:
                    pieces = None
                found = _join(found, pieces if pieces is not None else {(ANY,)})
        elif isinstance(expr, ast.IfExp):
            body = self._of(expr.body, scope, depth + 1)
            orelse = self._of(expr.orelse, scope, depth + 1)
            found = None if body is None or orelse is None else body | orelse
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left = self._of(expr.left, scope, depth + 1)
            right = self._of(expr.right, scope, depth + 1)
            found = None if left is None or right is None else _join(left, right)
        elif isinstance(expr, ast.Name):
            found = self._name(expr.id, scope, depth)
        elif isinstance(expr, ast.Call):
            found = self._returned(expr, depth)
        else:
            found = None
        if found is not None and len(found) > MAX_ALTERNATIVES:
            return None
        return found

    def _name(self, name: str, scope: _Scope, depth: int) -> set[Pattern] | None:
        here: _Scope | None = scope
        while here is not None:
            if name in here.assigned:
                return _union(self._of(v, here, depth + 1) for v in here.assigned[name])
            if name in here.params:
                return self._argument(here, name, depth)
            here = here.parent
        return None

    def _argument(self, scope: _Scope, name: str, depth: int) -> set[Pattern] | None:
        """What the call sites of ``scope``'s function pass for its parameter ``name``."""
        position, default = scope.params[name]
        values: list[set[Pattern] | None] = []
        for call, caller in self._calls.get(scope.name, ()):
            given = _keyword(call, name)
            if given is None and 0 <= position < len(call.args):
                given = call.args[position]
                if isinstance(given, ast.Starred):
                    return None
            if given is None:
                given = default
            if given is None:
                if call.keywords and any(k.arg is None for k in call.keywords):
                    return None  # **kwargs: the value is not in the source
                continue
            values.append(self._of(given, caller, depth + 1))
        return _union(values) if values else None

    def _returned(self, call: ast.Call, depth: int) -> set[Pattern] | None:
        name = _called(call)
        if name in _INT_CALLS:
            return {(INT,)}
        returns: list[set[Pattern] | None] = []
        for scope in self._functions.get(name, ()):
            for node in _own_nodes(scope.node):
                if isinstance(node, ast.Return) and node.value is not None:
                    returns.append(self._of(node.value, scope, depth + 1))
        return _union(returns) if returns else None


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``fn``'s body, not those of the functions nested in it."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _called(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_hole(part: str) -> bool:
    return part in _HOLES


def _union(parts: Iterable[set[Pattern] | None]) -> set[Pattern] | None:
    found: set[Pattern] = set()
    for part in parts:
        if part is None:
            return None
        found |= part
    return found


def _join(left: set[Pattern], right: set[Pattern]) -> set[Pattern]:
    return {_merge(a + b) for a in left for b in right}


def _merge(pattern: Pattern) -> Pattern:
    """Adjacent literal text joined, so equal names have one spelling."""
    merged: list[str] = []
    for part in pattern:
        if merged and not _is_hole(part) and not _is_hole(merged[-1]):
            merged[-1] += part
        elif part:
            merged.append(part)
    return tuple(merged)


def compile_pattern(pattern: Pattern) -> re.Pattern[str]:
    """The regular expression an op name must match in full."""
    return re.compile("".join(_HOLES.get(p) or re.escape(p) for p in pattern))


def read_op_names(sources: Iterable[bytes]) -> frozenset[Pattern]:
    """The op name patterns of the source files ``sources`` (a file that does not parse is
    skipped)."""
    trees = []
    for data in sources:
        try:
            trees.append(ast.parse(data))
        except (SyntaxError, ValueError):
            continue
    return OpNames(trees).patterns()
