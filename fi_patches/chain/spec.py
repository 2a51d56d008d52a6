"""CHAIN.toml: the ops of a chain in launch order, the row buckets to tune, and how to measure.

Every problem names the file, the entry, the field and its value; a file with any problem is
used not at all. Parsing needs neither torch nor FlashInfer.

The errors ``fi_patches.chain`` raises: a bad CHAIN.toml, a chain that cannot be tuned here,
and recorded measurements that do not cover what the selection asks for.

Which runner serves which rows for an op of a chain (:func:`check_routes` checks
with it that every bucket is served by one runner, and for wide tiles one tile, for every op).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fi_patches.pins.reading import LEFT_OUT, FieldReader, PinProblem, PinTableError, read_data_file
from fi_patches.pins.schema import LOW_LATENCY_MAX_ROWS, WIDE_MAX_ROWS
from fi_patches.wide.tactics import WIDE_MIN_ROWS, pick_tile


class ChainError(ValueError):
    """Base class of every error ``fi_patches.chain`` raises on purpose."""


class ChainSpecError(ChainError):
    """A CHAIN.toml that cannot be used; ``problems`` lists everything wrong with it, each
    naming the file, the entry, the field and its value."""

    def __init__(self, problems: list[PinProblem]) -> None:
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        head = "invalid chain" if len(lines) == 1 else f"invalid chain ({len(lines)} problems)"
        super().__init__(head + ":\n  " + "\n  ".join(lines))


class TuneError(ChainError):
    """The chain cannot be tuned as asked (an op offers no tactic, a timer cannot run here)."""


class ReplayError(TuneError):
    """A recorded-measurements file is unreadable or lacks a measurement the selection needs."""


class UpstreamError(ChainError):
    """A FlashInfer internal the chain adapters need is missing or changed (the reason says
    which)."""


def section_for(runner: str, rows: int) -> str | None:
    """The pin-table section serving ``rows`` rows for an op of ``runner``; None when that
    runner does not serve so many rows."""
    if runner == "mxfp8":
        if rows <= LOW_LATENCY_MAX_ROWS:
            return "low_latency"
        return "wide" if rows <= WIDE_MAX_ROWS else "cute_dsl"
    if runner == "low_latency":
        return runner if rows <= LOW_LATENCY_MAX_ROWS else None
    if runner == "wide":
        return runner if WIDE_MIN_ROWS <= rows <= WIDE_MAX_ROWS else None
    return runner


RUNNERS = ("low_latency", "wide", "cute_dsl", "mxfp8")
"""Runner names an op may give: one of the three pinnable runners, or ``mxfp8`` for the route
``fi_patches.mxfp8.mm`` takes by rows (see :func:`fi_patches.chain.spec.section_for`)."""

MAX_DIM = 1 << 20
MAX_ROWS = 1 << 16


@dataclass(frozen=True)
class Bucket:
    """Rows ``min_rows..max_rows`` share one pin; the chain is measured at ``rows`` rows."""

    min_rows: int
    max_rows: int
    rows: int
    index: int

    @property
    def label(self) -> str:
        return (
            str(self.min_rows)
            if self.min_rows == self.max_rows
            else (f"{self.min_rows}..{self.max_rows}")
        )


@dataclass(frozen=True)
class OpSpec:
    """One GEMM of the chain: ``rows x k`` activations times the ``(n, k)`` weight."""

    name: str
    n: int
    k: int
    runner: str
    index: int


@dataclass(frozen=True)
class Settings:
    """How candidates are measured and chosen (see docs/chain.md)."""

    repeats: int = 7
    """Interleaved rounds: each candidate gets one sample per round."""
    replays: int = 10
    """Timed graph replays per sample (the sample is their mean)."""
    warmup: int = 3
    """Untimed replays after each capture."""
    cold_l2: bool = True
    """Flush L2 before every timed replay, as a decode step finds it."""
    tie_tolerance: float = 0.01
    """Candidates within this fraction of the best median are tied."""
    max_passes: int = 4
    """Coordinate-descent passes per bucket before giving up on convergence."""
    max_candidates: int = 0
    """0: every tactic offered; N: the first N in FlashInfer's order, plus the current pin."""


EXAMPLES = Path(__file__).resolve().parent / "examples"
"""The chains shipped with fi_patches, one ``<name>.toml`` each."""


def shipped_examples() -> list[str]:
    """The names of the shipped example chains."""
    return sorted(path.stem for path in EXAMPLES.glob("*.toml"))


def chain_path(given: str | os.PathLike[str]) -> Path:
    """The CHAIN.toml ``given`` names: a path; or, for a bare name such as ``deepseek_v3_tp4``,
    ``<name>.toml`` in the working directory if there is one, else the shipped example of that
    name (see :func:`shipped_examples`), so a wheel's users can tune its examples too. A bare
    name that is neither is a :class:`ChainSpecError` listing the shipped examples."""
    path = Path(given)
    if path.exists() or path.name != str(given) or path.suffix:
        return path
    for found in (Path(f"{given}.toml"), EXAMPLES / f"{given}.toml"):
        if found.is_file():
            return found
    shipped = ", ".join(shipped_examples()) or "none"
    raise ChainSpecError(
        [
            PinProblem(
                str(given),
                "--chain",
                None,
                None,
                f"is no file, no {given}.toml here and no shipped example (shipped: {shipped})",
            )
        ]
    )


@dataclass(frozen=True)
class ChainSpec:
    name: str
    ops: tuple[OpSpec, ...]
    buckets: tuple[Bucket, ...]
    settings: Settings
    source: str

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ChainSpec:
        file = Path(path)
        source = str(file)
        try:
            data = read_data_file(file, source, what="chain file", suffixes=(".toml",))
        except PinTableError as exc:
            raise ChainSpecError(exc.problems) from exc
        return cls.from_mapping(data, source=source, default_name=file.stem)

    @classmethod
    def from_mapping(
        cls, data: object, source: str = "<mapping>", default_name: str = "chain"
    ) -> ChainSpec:
        problems: list[PinProblem] = []
        if not isinstance(data, Mapping):
            raise ChainSpecError([PinProblem(source, "top level", None, None, "must be a table")])
        for key in data:
            if key not in ("chain", "bucket", "op"):
                problems.append(
                    PinProblem(
                        source,
                        "top level",
                        str(key),
                        LEFT_OUT,
                        "is not a known section (known: chain, bucket, op)",
                    )
                )
        name, settings = _parse_chain(
            FieldReader(source, "[chain]", data.get("chain", {}), problems), default_name
        )
        buckets = _parse_array(data, "bucket", source, problems, _parse_bucket)
        ops = _parse_array(data, "op", source, problems, _parse_op)
        if not problems:
            _check_buckets(buckets, source, problems)
            _check_ops(ops, source, problems)
        if not problems:
            check_routes(ops, buckets, source, problems)
        if problems:
            raise ChainSpecError(problems)
        assert settings is not None
        return cls(name, tuple(ops), tuple(buckets), settings, source)


def _number(reader: FieldReader, name: str, lo: float, hi: float, default: float) -> float | None:
    value = reader.mapping.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        reader.problem(name, value, f"must be a number, not {type(value).__name__}")
        return None
    if not lo <= value <= hi:
        reader.problem(name, value, f"must be between {lo} and {hi}")
        return None
    return float(value)


def _flag(reader: FieldReader, name: str, default: bool) -> bool | None:
    value = reader.mapping.get(name, default)
    if not isinstance(value, bool):
        reader.problem(name, value, f"must be true or false, not {type(value).__name__}")
        return None
    return value


def _parse_chain(reader: FieldReader, default_name: str) -> tuple[str, Settings | None]:
    base = Settings()
    name = reader.string("name", default=default_name)
    values = {
        "repeats": reader.integer("repeats", lo=1, hi=1000, default=base.repeats),
        "replays": reader.integer("replays", lo=1, hi=10000, default=base.replays),
        "warmup": reader.integer("warmup", lo=0, hi=1000, default=base.warmup),
        "cold_l2": _flag(reader, "cold_l2", base.cold_l2),
        "tie_tolerance": _number(reader, "tie_tolerance", 0.0, 0.5, base.tie_tolerance),
        "max_passes": reader.integer("max_passes", lo=1, hi=50, default=base.max_passes),
        "max_candidates": reader.integer(
            "max_candidates", lo=0, hi=100000, default=base.max_candidates
        ),
    }
    reader.reject_unknown(("name", *values))
    if name is None or any(v is None for v in values.values()):
        return name or default_name, None
    return name, Settings(**values)  # type: ignore[arg-type]


def _parse_array(
    data: Mapping[str, Any], section: str, source: str, problems: list[PinProblem], parse: Any
) -> list[Any]:
    raw = data.get(section, [])
    if not isinstance(raw, list) or not raw:
        problems.append(
            PinProblem(source, f"[[{section}]]", None, None, "must be a non-empty array of tables")
        )
        return []
    parsed = []
    for index, item in enumerate(raw, start=1):
        entry = parse(FieldReader(source, f"[[{section}]] #{index}", item, problems), index)
        if entry is not None:
            parsed.append(entry)
    return parsed


def _parse_bucket(reader: FieldReader, index: int) -> Bucket | None:
    lo = reader.integer("min_rows", lo=1, hi=MAX_ROWS)
    hi = reader.integer("max_rows", lo=1, hi=MAX_ROWS)
    rows = reader.integer("rows", lo=1, hi=MAX_ROWS, default=hi)
    reader.reject_unknown(("min_rows", "max_rows", "rows"))
    if lo is None or hi is None or rows is None:
        return None
    if lo > hi:
        reader.problem("min_rows", lo, f"must not exceed max_rows ({hi})")
        return None
    if not lo <= rows <= hi:
        reader.problem("rows", rows, f"must be within min_rows..max_rows ({lo}..{hi})")
        return None
    return Bucket(lo, hi, rows, index)


def _parse_op(reader: FieldReader, index: int) -> OpSpec | None:
    name = reader.string("name")
    n = reader.integer("n", lo=1, hi=MAX_DIM)
    k = reader.integer("k", lo=1, hi=MAX_DIM)
    runner = reader.string("runner")
    reader.reject_unknown(("name", "n", "k", "runner"))
    if name is not None and not name.strip():
        reader.problem("name", name, "must not be empty")
        name = None
    if runner is not None and runner not in RUNNERS:
        reader.problem("runner", runner, f"must be one of {', '.join(RUNNERS)}")
        runner = None
    if name is None or n is None or k is None or runner is None:
        return None
    return OpSpec(name, n, k, runner, index)


def _check_buckets(buckets: list[Bucket], source: str, problems: list[PinProblem]) -> None:
    for previous, current in itertools.pairwise(buckets):
        if current.min_rows <= previous.max_rows:
            problems.append(
                PinProblem(
                    source,
                    f"[[bucket]] #{current.index}",
                    "min_rows",
                    current.min_rows,
                    f"must be above the previous bucket's max_rows ({previous.max_rows}):"
                    " buckets are listed in ascending, disjoint order",
                )
            )


def _check_ops(ops: list[OpSpec], source: str, problems: list[PinProblem]) -> None:
    seen: dict[str, int] = {}
    for op in ops:
        if op.name in seen:
            problems.append(
                PinProblem(
                    source,
                    f"[[op]] #{op.index}",
                    "name",
                    op.name,
                    f"is already the name of op #{seen[op.name]}",
                )
            )
        seen.setdefault(op.name, op.index)


def check_routes(
    ops: Sequence[OpSpec], buckets: Sequence[Bucket], source: str, problems: list[PinProblem]
) -> None:
    """Each op's runner serves every row of every bucket with one section (and, for wide
    tiles, one tile per bucket and a different tile for each bucket)."""
    for op in ops:
        tiles: dict[int, int] = {}
        for bucket in buckets:
            where = f"[[bucket]] #{bucket.index}"
            rows = range(bucket.min_rows, bucket.max_rows + 1)
            sections = {section_for(op.runner, r) for r in rows}
            if None in sections:
                served = [r for r in rows if section_for(op.runner, r) is not None]
                what = f"rows {served[0]}..{served[-1]} of it" if served else "none of its rows"
                problems.append(
                    PinProblem(
                        source,
                        where,
                        "max_rows",
                        bucket.max_rows,
                        f"op {op.name!r} (runner {op.runner}) serves {what}",
                    )
                )
                continue
            if len(sections) > 1:
                routes = " and ".join(sorted(str(s) for s in sections))
                problems.append(
                    PinProblem(
                        source,
                        where,
                        "max_rows",
                        bucket.max_rows,
                        f"rows {bucket.label} span the {routes}"
                        f" routes of op {op.name!r} (runner {op.runner}); split the "
                        f"bucket at {LOW_LATENCY_MAX_ROWS} and {WIDE_MAX_ROWS}",
                    )
                )
                continue
            if sections != {"wide"}:
                continue
            bucket_tiles = {pick_tile(r) for r in rows}
            if len(bucket_tiles) > 1:
                problems.append(
                    PinProblem(
                        source,
                        where,
                        "max_rows",
                        bucket.max_rows,
                        f"rows {bucket.label} need wide tiles {sorted(bucket_tiles)} for "
                        f"op {op.name!r}; a wide pin is per tile, so split the bucket",
                    )
                )
                continue
            tile = bucket_tiles.pop()
            if tile in tiles:
                problems.append(
                    PinProblem(
                        source,
                        where,
                        "min_rows",
                        bucket.min_rows,
                        f"rows {bucket.label} use wide tile {tile} like [[bucket]] "
                        f"#{tiles[tile]}; a wide pin is per tile, so merge them",
                    )
                )
            tiles.setdefault(tile, bucket.index)
