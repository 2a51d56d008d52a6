"""Property tests over the pin-table schema: generated valid tables, and tables and files
mutated with nulls, wrong types, out-of-bound, NaN and infinite numbers, unicode and duplicate
keys, unknown and misspelt fields, deep nesting, truncation and binary garbage.

Each either loads into exactly the entries given (compared type-strictly with what was
written, defaults filled as documented) or raises ``PinTableError`` whose every problem names
the file, and, for a mutation of one entry's field, a problem naming that entry and field.
Never another exception type, never a partial table, and each example within a CPU and a
wall bound (correctness bounds against hangs, not speed targets). Example counts come from the
Hypothesis profile (tests/conftest.py: ``ci`` by default, ``--hypothesis-profile=deep``; the two
properties that write files run a quarter of it, ``costly_examples``)."""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet

from fi_patches.compat.target import normalize_arch
from fi_patches.pins import PinTable, PinTableError
from fi_patches.pins.reading import MAX_FILE_BYTES, toml
from fi_patches.pins.schema import (
    CLUSTER_MAX,
    K_MAX,
    LOW_LATENCY_MAX_ROWS,
    N_MAX,
    ROWS_MAX,
    STAGES_MAX,
    TILER_MAX,
    WIDE_MAX_TILE,
)
from tests.conftest import costly_examples

# Nothing here depends on the installed FlashInfer release: the compat matrix runs it once, in
# the main run, not in every cell (see pyproject.toml).
pytestmark = pytest.mark.release_independent

SOURCE = "<hostile>"
CPU_BOUND_S = 2.0
"""A correctness bound on one example's CPU time (nothing may loop on a huge number), not a
speed target. CPU time, not wall time: on a shared host, another process can stall this one
for seconds (a deep run under load did, twice, on examples that take milliseconds)."""
WALL_BOUND_S = 30.0
"""Wall time after which an example counts as hung, whatever the host's load."""
FIELDS = {
    "meta": ("schema", "device", "flashinfer", "note", "source"),
    "low_latency": ("n", "k", "min_rows", "max_rows", "tactic"),
    "cute_dsl": ("n", "k", "min_rows", "max_rows", "tactic"),
    "wide": ("n", "k", "tile", "tactic"),
}


@contextmanager
def within_bounds() -> Iterator[None]:
    # The collector then scans only this example's objects: a full collection of everything a
    # long run accumulated (the deep profile's 20,000 examples) took 2.7 s of one example's CPU.
    gc.freeze()
    try:
        started, cpu = time.monotonic(), time.thread_time()
        yield
        used, elapsed = time.thread_time() - cpu, time.monotonic() - started
    finally:
        gc.unfreeze()
    assert used < CPU_BOUND_S, f"took {used:.2f} s of CPU"
    assert elapsed < WALL_BOUND_S, f"took {elapsed:.2f} s"


# --- valid tables ---------------------------------------------------------------------------

text = st.text(st.characters(codec="utf-8"), max_size=24)
shapes = st.tuples(
    st.one_of(st.integers(1, N_MAX), st.sampled_from([1, N_MAX])),
    st.one_of(st.integers(1, K_MAX), st.sampled_from([1, K_MAX])),
)
low_latency_tactics = st.tuples(
    st.integers(1, K_MAX),
    st.integers(1, STAGES_MAX),
    st.integers(1, STAGES_MAX),
    st.integers(1, STAGES_MAX),
).map(list)
cute_dsl_tactics = st.tuples(
    st.lists(st.integers(1, TILER_MAX), min_size=2, max_size=2),
    st.lists(st.integers(1, CLUSTER_MAX), min_size=2, max_size=2),
    st.booleans(),
    st.booleans(),
    st.integers(1, STAGES_MAX),
).map(list)


@st.composite
def meta(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {
        "device": draw(st.sampled_from(["sm_103", "sm103", "SM_100a", " sm_107 ", "*"])),
        "flashinfer": draw(st.sampled_from(["", ">=0.7.0", "==0.7.4", ">=0.7, <0.8", "~=0.7.1"])),
    }
    if draw(st.booleans()):
        data["schema"] = 1
    for optional in ("note", "source"):
        if draw(st.booleans()):
            data[optional] = draw(text)
    return data


@st.composite
def ranges(draw: st.DrawFn, top: int) -> list[tuple[int, int]]:
    """Disjoint row ranges within ``1..top``, in random order."""
    cuts = sorted(draw(st.sets(st.integers(1, top), min_size=1, max_size=6)))
    spans = [
        (lo, draw(st.integers(lo, nxt - 1)))
        for lo, nxt in zip(cuts, [*cuts[1:], top + 1], strict=True)
    ]
    return draw(st.permutations(spans))


@st.composite
def row_entries(draw: st.DrawFn, section: str) -> list[dict[str, Any]]:
    top = (
        LOW_LATENCY_MAX_ROWS if section == "low_latency" else draw(st.sampled_from([64, ROWS_MAX]))
    )
    tactics = low_latency_tactics if section == "low_latency" else cute_dsl_tactics
    entries = []
    for n, k in draw(st.lists(shapes, max_size=3, unique=True)):
        spans = draw(ranges(top))
        by_max = sorted(spans, key=lambda s: s[1])
        for lo, hi in spans:
            entry = {"n": n, "k": k, "min_rows": lo, "max_rows": hi, "tactic": draw(tactics)}
            previous = [h for _, h in by_max if h < hi]
            implicit_ok = lo == (previous[-1] if previous else 0) + 1
            may_omit = (section == "low_latency" and lo == 1) or (
                section == "cute_dsl" and implicit_ok
            )
            if may_omit and draw(st.booleans()):
                del entry["min_rows"]
            entries.append(entry)
    return draw(st.permutations(entries))


@st.composite
def wide_entries(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = draw(
        st.lists(
            st.tuples(shapes, st.integers(1, WIDE_MAX_TILE // 8).map(lambda t: 8 * t)),
            max_size=4,
            unique=True,
        )
    )
    return [
        {"n": n, "k": k, "tile": tile, "tactic": draw(low_latency_tactics)} for (n, k), tile in keys
    ]


@st.composite
def tables(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {"meta": draw(meta())}
    for section in ("low_latency", "cute_dsl"):
        if draw(st.booleans()):
            data[section] = draw(row_entries(section))
    if draw(st.booleans()):
        data["wide"] = draw(wide_entries())
    return data


# --- the oracle: what a faithful load gives back ---------------------------------------------


def strict(value: Any) -> Any:
    """``value`` with every leaf tagged by its type (so ``True`` never equals ``1``)."""
    if isinstance(value, (list, tuple)):
        return ("list", [strict(v) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: strict(v) for k, v in value.items()})
    return (type(value).__name__, value)


def expected_meta(data: dict[str, Any]) -> dict[str, Any]:
    device = data["device"]
    out = {
        "schema": data.get("schema", 1),
        "device": device if device == "*" else normalize_arch(device),
        "flashinfer": str(SpecifierSet(data["flashinfer"])),
    }
    for optional in ("note", "source"):
        if data.get(optional):
            out[optional] = data[optional]
    return out


def expected_entries(section: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for entry in entries:
        if section == "wide":
            out.append({key: entry[key] for key in FIELDS["wide"]})
            continue
        filled = {key: entry.get(key) for key in FIELDS[section]}
        if "min_rows" not in entry:
            if section == "low_latency":
                filled["min_rows"] = 1
            else:  # the row after the previous range of the shape, in max_rows order
                below = [
                    e["max_rows"]
                    for e in entries
                    if (e["n"], e["k"]) == (entry["n"], entry["k"])
                    and e["max_rows"] < entry["max_rows"]
                ]
                filled["min_rows"] = max(below, default=0) + 1
        out.append(filled)
    return out


def assert_faithful(table: PinTable, data: dict[str, Any], source: str) -> None:
    assert table.source == source
    assert strict(table.meta.to_mapping()) == strict(expected_meta(data["meta"]))
    for section in ("low_latency", "cute_dsl", "wide"):
        loaded = [e.to_mapping() for e in table.entries(section)]
        assert strict(loaded) == strict(expected_entries(section, data.get(section, [])))


def assert_refused_naming(error: PinTableError, source: str) -> None:
    assert error.problems, "a PinTableError must say what is wrong"
    for problem in error.problems:
        assert problem.source == source
        assert str(problem).startswith(f"{source}: ")
    str(error)
    error.one_line()


def load_mapping(data: Any) -> PinTable | PinTableError:
    try:
        return PinTable.from_mapping(data, source=SOURCE)
    except PinTableError as error:
        return error


# --- valid tables load exactly, from a mapping and from TOML and JSON files --------------------


def toml_string(value: str) -> str:
    escaped = []
    for char in value:
        if char in '"\\' or ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def to_toml(data: dict[str, Any]) -> str:
    lines = ["[meta]", *(f"{key} = {toml_value(v)}" for key, v in data["meta"].items())]
    for section, entries in data.items():
        if section != "meta":
            for entry in entries:
                lines += [
                    "",
                    f"[[{section}]]",
                    *(f"{k} = {toml_value(v)}" for k, v in entry.items()),
                ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@costly_examples()
@given(tables())
def test_valid_tables_load_exactly_the_entries_given(folder, data):
    with within_bounds():
        table = PinTable.from_mapping(data, source=SOURCE)
        assert_faithful(table, data, SOURCE)
        assert_faithful(PinTable.from_mapping(table.to_mapping()), data, "<mapping>")
        for name, body in (("t.toml", to_toml(data)), ("t.json", json.dumps(data))):
            path = folder / name
            path.write_text(body, encoding="utf-8")
            assert_faithful(PinTable.from_file(path), data, str(path))


# --- mutated mappings: refused naming the entry and the field ---------------------------------


@dataclass(frozen=True)
class Place:
    where: str
    container: dict[str, Any]


def places(data: dict[str, Any]) -> list[Place]:
    found = [Place("[meta]", data["meta"])]
    for section in ("low_latency", "cute_dsl", "wide"):
        found += [Place(f"[[{section}]] #{i}", e) for i, e in enumerate(data.get(section, []), 1)]
    return found


def deep(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"x": value}
    return value


FIELD_TOPS = {"n": N_MAX, "k": K_MAX, "tile": WIDE_MAX_TILE, "schema": 1}


def wrong_values(section: str, field: str) -> st.SearchStrategy[Any]:
    """Values ``field`` of ``section`` can never take: nulls, wrong types, numbers past its
    bounds, NaN and infinities, deep nesting, bytes, overlong strings."""
    top = FIELD_TOPS.get(field, LOW_LATENCY_MAX_ROWS if section == "low_latency" else ROWS_MAX)
    outside = [0, -1, -(2**70), 2**40, 10**5000, -(10**5000), top + 1]
    numbers = st.sampled_from(outside if field != "tile" else [*outside, 20, 127])
    others = st.one_of(
        st.none(),
        st.sampled_from([math.nan, math.inf, -math.inf, 1.5, 8.0]),
        st.booleans(),
        st.dictionaries(text, st.integers(), max_size=2),
        st.integers(1, 50_000).map(deep),
        st.binary(max_size=8),
    )
    if section == "meta" and field != "schema":
        return st.one_of(others, st.integers(), st.just("x" * 5000))
    if field == "tactic":
        parts = st.sampled_from([0, -1, 2**40, 10**5000, N_MAX + 1])
        return st.one_of(others, parts, st.lists(parts, min_size=4, max_size=5), text)
    return st.one_of(others, numbers, text)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], str, str]:
    """A valid table with one field of one place made invalid: ``(data, where, field)``."""
    data = draw(tables())
    place = draw(st.sampled_from(places(data)))
    kind = draw(st.sampled_from(["value", "unknown", "rename"]))
    section = place.where.split()[0].strip("[]")
    known = FIELDS[section]
    if kind == "value":
        field = draw(st.sampled_from(known))
        place.container[field] = draw(wrong_values(section, field))
        return data, place.where, field
    name = draw(text.filter(lambda t: t not in known))
    if kind == "rename":
        required = [f for f in known if f in place.container]
        old = draw(st.sampled_from(required))
        place.container[name] = place.container.pop(old)
    else:
        place.container[name] = draw(st.one_of(st.none(), st.integers(), text))
    return data, place.where, name


@given(mutated())
def test_a_mutated_table_is_refused_naming_the_entry_and_field(case):
    data, where, field = case
    with within_bounds():
        result = load_mapping(data)
        assert isinstance(result, PinTableError), f"loaded a table with {where} {field} broken"
        assert_refused_naming(result, SOURCE)
        named = [p for p in result.problems if p.where == where]
        assert any(p.field == field or field in p.message for p in named), str(result)


@given(tables(), st.sampled_from(["top", "section", "entry"]), st.data())
def test_wrong_shapes_at_every_level_are_refused(data, level, draw):
    with within_bounds():
        if level == "top":
            broken: Any = draw.draw(st.one_of(st.none(), st.lists(st.integers()), text))
        elif level == "section":
            section = draw.draw(st.sampled_from(["low_latency", "cute_dsl", "wide", "meta"]))
            data[section] = draw.draw(
                st.one_of(st.none(), st.integers(), text, st.integers(1, 9999).map(deep))
            )
            broken = data
        else:
            assume(any(data.get(s) for s in ("low_latency", "cute_dsl", "wide")))
            section = draw.draw(
                st.sampled_from([s for s in ("low_latency", "cute_dsl", "wide") if data.get(s)])
            )
            data[section][0] = draw.draw(
                st.one_of(st.none(), st.integers(), st.lists(st.integers()))
            )
            broken = data
        result = load_mapping(broken)
        assert isinstance(result, PinTableError)
        assert_refused_naming(result, SOURCE)


# --- mutated files: truncation, garbage, duplicate keys, deep nesting ------------------------


def reference_parse(body: bytes, suffix: str) -> Any:
    """What the standard parsers make of ``body``, or None when they refuse it."""
    try:
        text_ = body.decode("utf-8-sig")
        if suffix == ".toml":
            return toml.loads(text_)
        return json.loads(text_)
    except (ValueError, RecursionError):
        return None


@st.composite
def hostile_files(draw: st.DrawFn) -> tuple[str, bytes, Any]:
    """``(suffix, bytes, duplicate)``: a valid table's file, then damaged."""
    data = draw(tables())
    suffix = draw(st.sampled_from([".toml", ".json"]))
    body = (to_toml(data) if suffix == ".toml" else json.dumps(data, ensure_ascii=False)).encode()
    damage = draw(st.sampled_from(["truncate", "splice", "garbage", "nest", "duplicate", "huge"]))
    duplicate = None
    if damage == "truncate":
        body = body[: draw(st.integers(0, len(body)))]
    elif damage == "splice":
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.binary(min_size=1, max_size=16)) + body[at:]
    elif damage == "garbage":
        body = draw(st.one_of(st.binary(max_size=512), st.just(bytes(range(256)) * 5000)))
    elif damage == "nest":
        depth = draw(st.integers(1, 100_000))
        nested = (
            ("[" * depth + "]" * depth)
            if draw(st.booleans())
            else ("{a=" * depth + "1" + "}" * depth)
        )
        body = body + (f"\nx = {nested}\n" if suffix == ".toml" else "").encode()
        if suffix == ".json":
            body = b'{"meta": ' + b"[" * depth + b"]" * depth + b"}"
    elif damage == "duplicate" and suffix == ".json":
        place = draw(st.sampled_from(places(data)))
        field = draw(st.sampled_from(sorted(place.container)))
        twice = json.dumps(place.container, ensure_ascii=False)
        again = json.dumps(place.container[field])
        body = body.replace(
            twice.encode(), (twice[:-1] + f", {json.dumps(field)}: {again}}}").encode(), 1
        )
        duplicate = (place.where, field)
    elif damage == "huge":
        digits = draw(st.sampled_from([41, 4301, 100_000]))
        body = body.replace(b"1", b"9" * digits, 1)
    return suffix, body, duplicate


@costly_examples()
@given(hostile_files())
def test_a_damaged_file_loads_as_the_parsers_read_it_or_is_refused_naming_it(folder, case):
    suffix, body, duplicate = case
    path = folder / f"damaged{suffix}"
    path.write_bytes(body)
    with within_bounds():
        try:
            table = PinTable.from_file(path)
        except PinTableError as error:
            assert_refused_naming(error, str(path))
            if duplicate is not None:
                where, field = duplicate
                assert any(
                    p.where == where and p.field == field and "given twice" in p.message
                    for p in error.problems
                ), str(error)
            return
    assert len(body) <= MAX_FILE_BYTES and duplicate is None
    parsed = reference_parse(body, suffix)
    assert isinstance(parsed, dict), "loaded a file the standard parser refuses"
    assert_faithful(table, parsed, str(path))
