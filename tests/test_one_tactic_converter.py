"""One converter between a tactic's JSON form (lists) and its runner form (tuples):
``fi_patches.pins.keys.as_tactic`` and ``tactic_json``. A conversion written by hand elsewhere
(``tuple(t) if isinstance(t, list) else t``, ``list(entry.tactic)``, ``"tactic": list(rest)``)
converts one level where the helpers convert every level, so the two forms drift apart; this
reads fi_patches' source for such conversions."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "fi_patches"
CONVERTER = PACKAGE / "pins" / "keys.py"
SEQUENCES = ("tuple", "list")


def _sequence_call(node: ast.AST) -> ast.Call | None:
    """``node`` when it is ``tuple(x)`` or ``list(x)`` of one argument."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in SEQUENCES
        and len(node.args) == 1
        and not node.keywords
    ):
        return node
    return None


def _names_a_tactic(node: ast.AST) -> bool:
    """Whether ``node`` is one tactic by name (``tactic``, ``entry.tactic``), not a list of
    them or a part of one."""
    if isinstance(node, ast.Name):
        return node.id == "tactic" or node.id.endswith("_tactic")
    return isinstance(node, ast.Attribute) and node.attr == "tactic"


def _formatted(tree: ast.AST) -> set[int]:
    """Nodes inside f-string placeholders (a message's text, not a tactic's form)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue):
            found.update(id(n) for n in ast.walk(node))
    return found


def hand_conversions(source: str, where: str) -> list[str]:
    """Each place in ``source`` that converts a tactic between lists and tuples by hand."""
    tree = ast.parse(source)
    shown = _formatted(tree)
    found = []

    def flag(node: ast.AST, what: str) -> None:
        found.append(f"{where}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.IfExp) and _sequence_call(node.body):
            test = node.test
            if isinstance(test, ast.Call) and getattr(test.func, "id", "") == "isinstance":
                flag(node, f"converts by hand: {ast.unparse(node)}")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "tactic"
                    and _sequence_call(value)
                ):
                    flag(value, f"a tactic's form by hand: {ast.unparse(value)}")
        elif isinstance(node, ast.keyword) and node.arg == "tactic" and _sequence_call(node.value):
            flag(node.value, f"a tactic's form by hand: tactic={ast.unparse(node.value)}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "tactic" in node.name:
            for inner in ast.walk(node):
                if isinstance(inner, (ast.ListComp, ast.GeneratorExp)):
                    call = _sequence_call(inner.elt)
                    loop = inner.generators[0].target
                    if call and isinstance(loop, ast.Name) and ast.unparse(call.args[0]) == loop.id:
                        flag(inner, f"tactics converted by hand: {ast.unparse(inner)}")
        call = _sequence_call(node)
        if call is not None and id(node) not in shown and _names_a_tactic(call.args[0]):
            flag(node, f"a tactic's form by hand: {ast.unparse(node)}")
    return sorted(set(found))


def test_tactics_are_converted_by_the_one_converter_only():
    problems = [
        problem
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != CONVERTER
        for problem in hand_conversions(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert problems == [], "use fi_patches.pins.keys.as_tactic / tactic_json:\n" + "\n".join(
        problems
    )


def test_the_check_finds_each_hand_written_conversion():
    source = (
        "def f(runner, entry, rest, tactic, found):\n"
        "    stock = [tuple(t) if isinstance(t, list) else t for t in runner.offered()]\n"
        "    problem = make('tactic', list(entry.tactic))\n"
        "    row = {'n': 1, 'tactic': list(rest)}\n"
        "    run(tactic=tuple(tactic))\n"
        "    message = f'got {tuple(tactic)}'\n"
        "def autotune_tactics(found):\n"
        "    return [tuple(t) for t in found]\n"
        "def shapes(found):\n"
        "    return tuple(tuple(s) for s in found)\n"
    )
    found = hand_conversions(source, "bad.py")
    assert sorted({line.split(":")[1] for line in found}) == ["2", "3", "4", "5", "8"], found
