"""FlashInfer's tuner key as fi_patches reads it, tactics in one form, and the ``[[pin]]`` entry
that pins one key to a tactic.

FlashInfer's tuner caches one winner per key ``(custom op, runner class name, profile,
extras)``: the profile is the input shapes with the tuned dimension mapped to its bucket (a
constrained dimension reads ``-1``), and the extras are what the runner's
``get_cache_key_extras`` adds (dtypes, layout flags). Its JSON files spell a key as
``str((op, runner, profile, extras))`` and a tactic as JSON (tuples as lists).

A pin names a key by a :class:`ShapePattern`: the profile with the tuned dimension written
``"rows"`` wherever it appears (one entry then covers a range of buckets), and ``-1`` or ``"*"``
for a dimension any value matches. Nothing here imports FlashInfer or torch.

The ``[[pin]]`` entry (:class:`TunerPin`, below the key's readers) is one FlashInfer tuner key and
the tactic it is pinned to, for any op. It names its key as FlashInfer's tuner does: the custom
op, the runner class, the profile's shapes (the tuned dimension written ``"rows"``, covering the
buckets whose value lies in ``min_rows..max_rows``), optionally the runner's extras as
FlashInfer's cache files spell them, and the tactic in FlashInfer's JSON form::

    [[pin]]
    op = "bf16_gemm"
    runner = "CublasltBf16GemmRunner"
    shapes = [["rows", 4096], [4096, 7168], [0], [0], [-1, 7168], [-1]]
    min_rows = 1
    max_rows = 16
    extras = "(torch.bfloat16, torch.bfloat16, torch.float32, True, False)"
    tactic = 3

No field depends on the op, so an op FlashInfer adds tomorrow is pinnable by the same form.
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fi_patches.pins.reading import LEFT_OUT, FieldReader, OversizeInteger, PinProblem, kind

ROWS = "rows"
"""How a pin spells the tuned dimension (rows, tokens) in its shapes."""

ANY = "*"
"""A dimension any value matches (FlashInfer's own constrained dimensions read ``-1``)."""

Profile = tuple[tuple[int, ...], ...]
_SCALAR = (0,)
"""The shape FlashInfer's tuner gives a non-tensor input."""
Dim = int | str


def as_tactic(value: Any) -> Any:
    """A tactic as FlashInfer's runners hold it: every list (JSON) a tuple, recursively."""
    if isinstance(value, (list, tuple)):
        return tuple(as_tactic(part) for part in value)
    return value


def tactic_json(tactic: Any) -> Any:
    """A tactic in its JSON form: every tuple a list, recursively (tables and caches)."""
    if isinstance(tactic, (list, tuple)):
        return [tactic_json(part) for part in tactic]
    return tactic


def tactic_text(tactic: Any) -> str:
    """A tactic as compact JSON, as tables and messages show it."""
    return json.dumps(tactic_json(tactic), separators=(",", ":"))


def extras_text(extras: Sequence[Any]) -> str:
    """The extras as FlashInfer's file key spells them (the ``repr`` of their tuple)."""
    return repr(tuple(extras))


@dataclass(frozen=True)
class TunerKey:
    """One key of FlashInfer's tuner cache, identity-free (as its files hold it)."""

    op: str
    runner: str
    profile: Profile
    extras: str
    """The extras' text, as :func:`extras_text` writes it."""

    @property
    def file_key(self) -> str:
        """The key as FlashInfer's JSON files spell it."""
        return f"({self.op!r}, {self.runner!r}, {self.profile!r}, {self.extras})"


def _top_level(text: str) -> list[str]:
    """The comma-separated elements of a tuple's repr, split at depth 1 (quotes respected)."""
    parts, depth, start, quote, escaped = [], 0, 1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
            if depth == 0:
                parts.append(text[start:i])
                break
        elif ch == "," and depth == 1:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in parts]


def _profile(value: Any) -> Profile | None:
    if not isinstance(value, tuple):
        return None
    shapes = []
    for shape in value:
        if not isinstance(shape, tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape
        ):
            return None
        shapes.append(shape)
    return tuple(shapes)


def parse_file_key(text: str) -> TunerKey | None:
    """The key a FlashInfer file key string spells, or None when it is not of that form. The
    extras stay text (they hold reprs of DSL classes, which are not literals)."""
    if not text.startswith("(") or len(text) > 1 << 16:
        return None
    parts = _top_level(text)
    if len(parts) != 4:
        return None
    try:
        op, runner, profile = (ast.literal_eval(p) for p in parts[:3])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    shapes = _profile(profile)
    if not (isinstance(op, str) and isinstance(runner, str)) or shapes is None:
        return None
    return TunerKey(op, runner, shapes, parts[3])


def profile_of(shapes: Sequence[Sequence[int]]) -> Profile:
    """Shapes as a profile (plain ints)."""
    return tuple(tuple(int(d) for d in shape) for shape in shapes)


@dataclass(frozen=True)
class ShapePattern:
    """A profile with the tuned dimension written ``"rows"`` and free dimensions ``"*"``."""

    dims: tuple[tuple[Dim, ...], ...]

    @functools.cached_property
    def rows_at(self) -> tuple[tuple[int, int], ...]:
        """``(input, dim)`` of every ``"rows"`` dimension."""
        return tuple(
            (i, j) for i, shape in enumerate(self.dims) for j, d in enumerate(shape) if d == ROWS
        )

    @functools.cached_property
    def has_rows(self) -> bool:
        return bool(self.rows_at)

    def fixed(self) -> tuple[Any, ...]:
        """The pattern with ``"rows"`` and free dimensions blanked: the index key of
        :meth:`masked`."""
        return tuple(
            tuple(None if d in (ROWS, ANY) or d == -1 else d for d in shape) for shape in self.dims
        )

    def masked(self, profile: Sequence[Sequence[int]]) -> tuple[Any, ...] | None:
        """``profile`` blanked where this pattern is not fixed (None if the ranks differ)."""
        if len(profile) != len(self.dims):
            return None
        out = []
        for shape, pattern in zip(profile, self.dims, strict=True):
            if len(shape) != len(pattern):
                return None
            out.append(
                tuple(
                    None if p in (ROWS, ANY) or p == -1 else int(d)
                    for d, p in zip(shape, pattern, strict=True)
                )
            )
        return tuple(out)

    def rows_of(self, profile: Sequence[Sequence[int]]) -> int | None:
        """The tuned dimension's value in ``profile`` (0 for a pattern without one), or None
        when the ``"rows"`` dimensions of ``profile`` disagree."""
        values = {int(profile[i][j]) for i, j in self.rows_at}
        if not values:
            return 0
        return values.pop() if len(values) == 1 else None

    @functools.cached_property
    def _checks(self) -> tuple[tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...], Any]:
        fixed = []
        for i, shape in enumerate(self.dims):
            dims = tuple((j, int(d)) for j, d in enumerate(shape) if d not in (ROWS, ANY, -1))
            if dims or ROWS in shape:
                fixed.append((i, len(shape), dims))
        return tuple(fixed), self.rows_at

    def rows_of_inputs(self, inputs: Sequence[Any]) -> int | None:
        """The tuned dimension's value in a call's inputs (0 without one) when their shapes
        match this pattern as given, else None. Only inputs with a fixed or ``"rows"`` dimension
        are read, ranks included (a non-tensor reads ``(0,)``); one of wildcards only matches
        anything."""
        if len(inputs) != len(self.dims):
            return None
        fixed, rows_at = self._checks
        try:
            for i, rank, dims in fixed:
                shape = getattr(inputs[i], "shape", _SCALAR)
                if len(shape) != rank:
                    return None
                for j, value in dims:
                    if shape[j] != value:
                        return None
            if not rows_at:
                return 0
            i, j = rows_at[0]
            rows = int(inputs[i].shape[j])
            for i, j in rows_at[1:]:
                if int(inputs[i].shape[j]) != rows:
                    return None
        except (IndexError, AttributeError, TypeError):
            return None
        return rows

    def text(self) -> str:
        return json.dumps([list(shape) for shape in self.dims], separators=(",", ":"))


def bucket_groups(bucket_of: Callable[[int], int], max_rows: int) -> list[tuple[int, int]]:
    """Row ranges ``(lo, hi)`` within ``1..max_rows`` that FlashInfer's tuner files under one
    bucket (``bucket_of`` maps a row count to its bucket)."""
    groups: list[tuple[int, int]] = []
    for rows in range(1, max_rows + 1):
        if groups and bucket_of(rows) == bucket_of(groups[-1][0]):
            groups[-1] = (groups[-1][0], rows)
        else:
            groups.append((rows, rows))
    return groups


def bucket_rows(bucket_of: Callable[[int], int], bucket: int) -> tuple[int, int]:
    """The rows ``lo..hi`` that FlashInfer's tuner files under ``bucket`` (``bucket, bucket``
    when no row count up to it maps there)."""
    for lo, hi in bucket_groups(bucket_of, bucket):
        if bucket_of(lo) == bucket:
            return lo, hi
    return bucket, bucket


# the [[pin]] entry ----------

SECTION = "pin"

_TOKENS = itertools.count(1)

NAME_MAX = 256
"""Characters of an op or runner name (FlashInfer's are under 80)."""

INPUTS_MAX = 64
"""Inputs of a profile (FlashInfer's MoE ops take about 30)."""

DIMS_MAX = 8
"""Dimensions of one input's shape."""

DIM_MAX = 1 << 40
"""A dimension's value (workspace sizes are bytes: tens of MiB)."""

TOKENS_MAX = 1 << 20
"""The tuned dimension's range (FlashInfer tunes buckets up to a few thousand tokens)."""

EXTRAS_MAX = 4096
"""Characters of the extras' text."""

TACTIC_TEXT_MAX = 4096
"""Characters of a tactic's JSON text."""

TACTIC_DEPTH_MAX = 8
"""Nesting of a tactic's lists and tables."""

FIELDS = ("op", "runner", "shapes", "min_rows", "max_rows", "extras", "tactic")


@dataclass(frozen=True)
class TunerPin:
    """A pinned tactic for one FlashInfer tuner key, or a range of its tuned buckets."""

    SECTION: ClassVar[str] = SECTION
    op: str
    runner: str
    shapes: ShapePattern
    min_rows: int
    max_rows: int
    extras: str | None
    """FlashInfer's extras text, or None: any extras."""
    tactic: Any
    """In FlashInfer's runner form (lists as tuples)."""
    index: int
    token: int = field(default_factory=lambda: next(_TOKENS), compare=False, repr=False)
    """This entry's identity, cheap to hash (verdicts about it are kept per token)."""

    @property
    def rows_text(self) -> str:
        if not self.shapes.has_rows:
            return "-"
        if self.min_rows == self.max_rows:
            return str(self.min_rows)
        return f"{self.min_rows}..{self.max_rows}"

    def covers(self, rows: int) -> bool:
        """Whether the bucket ``rows`` (0 for a key without a tuned dimension) is pinned."""
        return not self.shapes.has_rows or self.min_rows <= rows <= self.max_rows

    def describe(self) -> str:
        """``op runner shapes`` as messages name the key."""
        rows = f" rows {self.rows_text}" if self.shapes.has_rows else ""
        return f"op {self.op!r} runner {self.runner} shapes {self.shapes.text()}{rows}"

    def to_mapping(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "op": self.op,
            "runner": self.runner,
            "shapes": [list(shape) for shape in self.shapes.dims],
        }
        if self.shapes.has_rows:
            data["min_rows"] = self.min_rows
            data["max_rows"] = self.max_rows
        if self.extras is not None:
            data["extras"] = self.extras
        data["tactic"] = tactic_json(self.tactic)
        return data


def _dim(value: object) -> int | str | None:
    if value in (ROWS, ANY):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= DIM_MAX:
        return None
    return value


def parse_shapes(value: object) -> ShapePattern | None:
    """``[[dim, ...], ...]`` (ints, ``"rows"``, ``"*"``) as a pattern, or None."""
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= INPUTS_MAX:
        return None
    shapes = []
    for shape in value:
        if not isinstance(shape, (list, tuple)) or len(shape) > DIMS_MAX:
            return None
        dims = [_dim(d) for d in shape]
        if any(d is None for d in dims):
            return None
        shapes.append(tuple(d for d in dims if d is not None))
    return ShapePattern(tuple(shapes))


SHAPES_FORM = (
    f"a list of at most {INPUTS_MAX} shapes, each a list of at most {DIMS_MAX} dimensions: "
    f'integers -1..{DIM_MAX}, "{ROWS}" for the tuned dimension or "{ANY}" for any'
)


def _tactic_value(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is a JSON value a tactic can be (finite numbers, bounded nesting)."""
    if depth > TACTIC_DEPTH_MAX or isinstance(value, OversizeInteger):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_tactic_value(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _tactic_value(v, depth + 1) for k, v in value.items())
    return False


def parse_tactic(value: object) -> Any:
    """A tactic in FlashInfer's JSON form as its runners hold it, or None when it is not one."""
    if not _tactic_value(value):
        return None
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    if len(text) > TACTIC_TEXT_MAX:
        return None
    return as_tactic(value)


def _name(reader: FieldReader, field: str) -> str | None:
    value = reader.string(field, max_length=NAME_MAX)
    if value is not None and (not value.strip() or value != value.strip()):
        reader.problem(field, value, "must be a name without surrounding spaces")
        return None
    return value


def parse_pin(reader: FieldReader, index: int) -> TunerPin | None:
    """One ``[[pin]]`` entry; None (with problems recorded) when it is invalid."""
    op = _name(reader, "op")
    runner = _name(reader, "runner")
    shapes = reader.parsed("shapes", parse_shapes, SHAPES_FORM)
    has_rows = shapes is not None and shapes.has_rows
    if has_rows:
        min_rows = reader.integer("min_rows", lo=1, hi=TOKENS_MAX, default=1)
        max_rows = reader.integer("max_rows", lo=1, hi=TOKENS_MAX)
    else:
        min_rows = max_rows = 0
        for field in ("min_rows", "max_rows"):
            if shapes is not None and field in reader.mapping:
                reader.problem(
                    field, reader.mapping[field], f'applies only to shapes holding "{ROWS}"'
                )
    extras = reader.string("extras", default=None, max_length=EXTRAS_MAX)
    given, raw = "tactic" in reader.mapping, reader.mapping.get("tactic")
    tactic = parse_tactic(raw) if given else None
    if not given:
        reader.problem("tactic", LEFT_OUT, "is required")
    elif tactic is None and raw is not None:
        reader.problem(
            "tactic",
            raw,
            f"must be FlashInfer's JSON form of a tactic (numbers, strings, booleans, lists; "
            f"at most {TACTIC_TEXT_MAX} characters, nested at most {TACTIC_DEPTH_MAX} deep)",
        )
    elif raw is None:
        reader.problem("tactic", raw, f"must be a tactic, not {kind(raw)}")
    reader.reject_unknown(FIELDS)
    if min_rows is not None and max_rows is not None and has_rows and min_rows > max_rows:
        reader.problem("min_rows", min_rows, f"must not exceed max_rows ({max_rows})")
        return None
    if op is None or runner is None or shapes is None or tactic is None:
        return None
    if min_rows is None or max_rows is None:
        return None
    return TunerPin(op, runner, shapes, min_rows, max_rows, extras, tactic, index)


def check_pins(
    section: str, entries: Sequence[TunerPin], source: str, problems: list[PinProblem]
) -> Sequence[TunerPin]:
    """A problem for each entry whose key (or bucket range) another entry already pins."""
    seen: dict[tuple[Any, ...], list[TunerPin]] = {}
    for entry in entries:
        key = (entry.op, entry.runner, entry.shapes, entry.extras)
        for other in seen.get(key, []):
            if entry.min_rows <= other.max_rows and other.min_rows <= entry.max_rows:
                what = f"rows {entry.rows_text} overlap" if entry.shapes.has_rows else "repeats"
                problems.append(
                    PinProblem(
                        source,
                        f"[[{section}]] #{entry.index}",
                        "min_rows" if entry.shapes.has_rows else "shapes",
                        entry.min_rows if entry.shapes.has_rows else entry.shapes.text(),
                        f"{what} entry #{other.index}'s key ({other.describe()})",
                    )
                )
                break
        seen.setdefault(key, []).append(entry)
    return entries


def runner_overlaps(entries: Sequence[TunerPin]) -> list[tuple[TunerPin, TunerPin]]:
    """Pairs of entries that pin two runners of one op for the same shapes and overlapping rows
    (whatever their extras): one pair for each entry that overlaps an earlier one in row order,
    the later entry first. A table holds them where the op is called with one runner at a time
    (a ``backend`` argument); a call offering both tunes both pins. Entries of one op and shapes
    are swept in row order, so thousands of them cost ``n log n``."""
    by_shapes: dict[tuple[str, ShapePattern], list[TunerPin]] = {}
    for entry in entries:
        by_shapes.setdefault((entry.op, entry.shapes), []).append(entry)
    pairs: list[tuple[TunerPin, TunerPin]] = []
    for group in by_shapes.values():
        if len({e.runner for e in group}) < 2:
            continue
        # the two furthest-reaching entries seen so far, of two different runners
        reach: list[TunerPin] = []
        for entry in sorted(group, key=lambda e: (e.min_rows, e.max_rows, e.index)):
            other = next((r for r in reach if r.runner != entry.runner), None)
            if other is not None and other.max_rows >= entry.min_rows:
                pairs.append((entry, other))
            mine = [r for r in reach if r.runner == entry.runner]
            if not mine or entry.max_rows > mine[0].max_rows:
                reach = [entry, *(r for r in reach if r.runner != entry.runner)]
            reach = sorted(reach, key=lambda r: -r.max_rows)[:2]
    return pairs
