"""The op names FlashInfer builds at run time, read from its sources as patterns.

Most ops are tuned under a string literal, but some names are made per call: an f-string
(``f"{dtype_str}_tgv_gemm"``) or a helper's return value (``_sm120_linear_op_name(...)``).
This follows what reaches ``choose_one``'s first argument back through assignments, parameters
(their call sites), helper functions' returns and f-strings, and keeps each name as a pattern of
literal text and holes. A hole the sources bound (a local assigned ``"bf16"`` or ``"fp16"``)
becomes those values; an ``int(...)`` an integer; anything else any text. A name with no literal
text at all (an op named by a value the sources never spell) yields no pattern, so it never
makes an arbitrary name known.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

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


def read(sources: Iterable[bytes]) -> frozenset[Pattern]:
    """The op name patterns of the source files ``sources`` (a file that does not parse is
    skipped)."""
    trees = []
    for data in sources:
        try:
            trees.append(ast.parse(data))
        except (SyntaxError, ValueError):
            continue
    return OpNames(trees).patterns()
