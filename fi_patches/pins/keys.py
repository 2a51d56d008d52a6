"""FlashInfer's tuner key as fi_patches reads it, and tactics in one form.

FlashInfer's tuner caches one winner per key ``(custom op, runner class name, profile,
extras)``: the profile is the input shapes with the tuned dimension mapped to its bucket (a
constrained dimension reads ``-1``), and the extras are what the runner's
``get_cache_key_extras`` adds (dtypes, layout flags). Its JSON files spell a key as
``str((op, runner, profile, extras))`` and a tactic as JSON (tuples as lists).

A pin names a key by a :class:`ShapePattern`: the profile with the tuned dimension written
``"rows"`` wherever it appears (one entry then covers a range of buckets), and ``-1`` or ``"*"``
for a dimension any value matches. Nothing here imports FlashInfer or torch.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
