"""The pin table schema: ``[meta]`` plus one array of tables per pinned runner. Sections are
registered here so new runners add a section without changing how tables load.

Every number has an upper bound no real model reaches, checked here, before anything asks
FlashInfer about the table (its enumerators loop over ``k``; the cute-dsl check allocates a
``rows x k`` activation). A table outside them is refused whole:

=======================================  =============================================
field                                    bound
=======================================  =============================================
``n`` (output features)                  1 .. 1,048,576 (2**20; a 262,144-entry vocab)
``k`` (input features)                   1 .. 262,144 (2**18)
``[[low_latency]]`` ``min/max_rows``     1 .. 8 (the runner's limit)
``[[cute_dsl]]`` ``min/max_rows``        1 .. 131,072 (2**17)
``[[wide]]`` ``tile``                    8 .. 128, a multiple of 8
low-latency / wide ``tactic``            cta_k 1 .. 262,144; ab_stages, sfb_tmem_stages,
                                         split_k 1 .. 64
``[[cute_dsl]]`` ``tactic``              mma tile sizes 1 .. 1,024; cluster sizes and
                                         split_k 1 .. 64
``[meta]`` ``schema``                    1 .. 1 (the version this fi_patches reads)
``[meta]`` strings                       4,096 characters
entries per section                      1,024 (``[[pin]]``: 16,384)
=======================================  =============================================

A pin file is at most 16 MiB (``files.MAX_FILE_BYTES``), refused before it is parsed.

The row and tile limits of the low-latency MXFP8 GEMM and the wide tile, and the names
FlashInfer's tuner knows the wide runner by, are declared here once each: the sections' bounds,
which the engine, the features and the tools read as the same number.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from fi_patches.compat.target import normalize_arch, parse_specifier, unknown_arch
from fi_patches.pins.keys import SECTION as PIN_SECTION
from fi_patches.pins.keys import check_pins, parse_pin, tactic_json
from fi_patches.pins.reading import FieldReader, PinProblem

# the low-latency GEMM's and the wide tile's limits ----------

LOW_LATENCY_MAX_ROWS = 8
"""FlashInfer's low-latency runner serves at most 8 activation rows."""

WIDE_MAX_ROWS = 48
"""Most rows the wide tile serves by default (tiles 16, 32, 48)."""

WIDE_MAX_TILE = 128
"""Widest activation tile of the low-latency kernel's body: the SFB TMEM column count assumes
one 128-row scale atom per tile (see ``wide.budget``)."""

WIDE_RUNNER = "WideLowLatencyGemmRunner"
"""The wide runner's class name, as FlashInfer's tuner keys its cache entries."""

WIDE_OP = "fi_patches_wide_mxfp8_gemm"
"""The custom op FlashInfer's tuner tunes the wide runner under."""

# the bounds of every field ----------

SCHEMA_VERSION = 1
N_MAX = 1 << 20
"""Output features of a weight: above the widest vocabulary head (262,144 entries)."""

K_MAX = 1 << 18
"""Input features of a weight: several times the widest MLP (53,248 in a 405B model)."""

ROWS_MAX = 1 << 17
"""Activation rows of a ``[[cute_dsl]]`` range: above any prefill batch a GEMM gets."""

STAGES_MAX = 64
"""Pipeline stages and split-K ways of a tactic (FlashInfer offers at most 12 and 8)."""

TILER_MAX = 1024
"""MMA tile sizes of a cute-dsl tactic (FlashInfer's are at most 256)."""

CLUSTER_MAX = 64
"""Cluster sizes of a cute-dsl tactic (a cluster holds at most 16 CTAs)."""

TEXT_MAX = 4096
"""Characters of a ``[meta]`` string."""

MAX_ENTRIES = 1024
"""Entries of one MXFP8 section (a model pins tens)."""

MAX_PIN_ENTRIES = 16384
"""Entries of ``[[pin]]`` (every op and bucket a server tunes: a few thousand)."""

LOW_LATENCY_TACTIC_PARTS = (
    ("cta_k", 1, K_MAX),
    ("ab_stages", 1, STAGES_MAX),
    ("sfb_tmem_stages", 1, STAGES_MAX),
    ("split_k", 1, STAGES_MAX),
)
"""Bounds of each integer of a low-latency (and wide) tactic."""

LowLatencyTactic = tuple[int, int, int, int]
"""``(cta_k, ab_stages, sfb_tmem_stages, split_k)``, as ``autotune_tactics`` lists them."""

CuteDslTactic = tuple[tuple[int, int], tuple[int, int], bool, bool, int]
"""``(mma_tiler_mn, cluster_shape_mn, swap_ab, use_prefetch, split_k)``, as FlashInfer's
``cute-dsl`` MXFP8 runner lists them."""


ON_INVALID = ("refuse", "tune")
"""``[meta] on_invalid``: a table with an entry invalid here is refused whole (the default), or
applied without it, that key left to the tuner."""


ANY_RELEASE = ("*", "")
"""``[meta] flashinfer`` values meaning any FlashInfer release, as ``device = "*"`` means any
device (FlashInfer's own cache metadata spells its wildcard ``"*"`` too)."""


@dataclass(frozen=True)
class PinMeta:
    """Where the pins were chosen: ``device`` (``sm_103`` or ``*``) and a FlashInfer specifier."""

    device: str
    flashinfer: SpecifierSet
    schema: int = SCHEMA_VERSION
    note: str = ""
    source: str = ""
    on_invalid: str = "refuse"
    """What an entry invalid here does: ``refuse`` the table whole, or ``tune`` (that key is
    left to FlashInfer's tuner, with one warning listing such entries)."""

    def to_mapping(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": self.schema,
            "device": self.device,
            "flashinfer": str(self.flashinfer),
        }
        if self.on_invalid != "refuse":
            data["on_invalid"] = self.on_invalid
        if self.note:
            data["note"] = self.note
        if self.source:
            data["source"] = self.source
        return data


def parse_meta(reader: FieldReader) -> PinMeta | None:
    """The ``[meta]`` table; None (with problems recorded) when it is invalid."""
    schema = reader.integer("schema", lo=1, default=SCHEMA_VERSION)
    if schema is not None and schema > SCHEMA_VERSION:
        reader.problem(
            "schema", schema, f"this fi_patches reads schema {SCHEMA_VERSION}; upgrade fi_patches"
        )
        schema = None
    device = reader.string("device", max_length=TEXT_MAX)
    if device is not None and device != "*" and normalize_arch(device) is None:
        reader.problem(
            "device",
            device,
            unknown_arch(device) or "must be an arch such as 'sm_103', or '*' for any device",
        )
    spec_text = reader.string("flashinfer", max_length=TEXT_MAX)
    spec = None
    if spec_text is not None and spec_text.strip() in ANY_RELEASE:
        spec = SpecifierSet()
    elif spec_text is not None:
        try:
            spec = parse_specifier(spec_text)
        except ValueError as exc:
            reader.problem("flashinfer", spec_text, f"{exc}, or '*' for any release")
    note = reader.string("note", default="", max_length=TEXT_MAX)
    source = reader.string("source", default="", max_length=TEXT_MAX)
    on_invalid = reader.string("on_invalid", default="refuse", max_length=TEXT_MAX)
    if on_invalid is not None and on_invalid not in ON_INVALID:
        reader.problem("on_invalid", on_invalid, f"must be one of {', '.join(ON_INVALID)}")
        on_invalid = None
    reader.reject_unknown(("schema", "device", "flashinfer", "note", "source", "on_invalid"))
    if device is None or spec is None or schema is None or note is None or source is None:
        return None
    if on_invalid is None:
        return None
    arch = device if device == "*" else normalize_arch(device)
    if arch is None:
        return None
    return PinMeta(arch, spec, schema, note or "", source or "", on_invalid)


@dataclass(frozen=True)
class RowRangePin:
    """A pin for the weight shape ``(n, k)`` at ``min_rows..max_rows`` activation rows."""

    n: int
    k: int
    min_rows: int
    max_rows: int
    index: int

    @property
    def rows_text(self) -> str:
        if self.min_rows == self.max_rows:
            return str(self.min_rows)
        return f"{self.min_rows}..{self.max_rows}"


@dataclass(frozen=True)
class LowLatencyPin(RowRangePin):
    """A ``cutedsl_low_latency`` tactic for MXFP8 problems of one weight shape and row range."""

    SECTION: ClassVar[str] = "low_latency"
    tactic: LowLatencyTactic

    def to_mapping(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "k": self.k,
            "min_rows": self.min_rows,
            "max_rows": self.max_rows,
            "tactic": tactic_json(self.tactic),
        }


def _parse_low_latency(reader: FieldReader, index: int) -> LowLatencyPin | None:
    n = reader.integer("n", lo=1, hi=N_MAX)
    k = reader.integer("k", lo=1, hi=K_MAX)
    min_rows = reader.integer("min_rows", lo=1, hi=LOW_LATENCY_MAX_ROWS, default=1)
    max_rows = reader.integer("max_rows", lo=1, hi=LOW_LATENCY_MAX_ROWS)
    tactic = reader.int_tuple("tactic", LOW_LATENCY_TACTIC_PARTS)
    reader.reject_unknown(("n", "k", "min_rows", "max_rows", "tactic"))
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        reader.problem("min_rows", min_rows, f"must not exceed max_rows ({max_rows})")
        return None
    if n is None or k is None or min_rows is None or max_rows is None or tactic is None:
        return None
    return LowLatencyPin(
        n, k, min_rows, max_rows, index, (tactic[0], tactic[1], tactic[2], tactic[3])
    )


@dataclass(frozen=True)
class WidePin:
    """A tactic of the wide-tile low-latency kernel for one weight shape and activation tile."""

    SECTION: ClassVar[str] = "wide"
    n: int
    k: int
    tile: int
    tactic: LowLatencyTactic
    index: int

    def to_mapping(self) -> dict[str, Any]:
        return {"n": self.n, "k": self.k, "tile": self.tile, "tactic": tactic_json(self.tactic)}


def _parse_wide(reader: FieldReader, index: int) -> WidePin | None:
    n = reader.integer("n", lo=1, hi=N_MAX)
    k = reader.integer("k", lo=1, hi=K_MAX)
    tile = reader.integer("tile", lo=8, hi=WIDE_MAX_TILE)
    tactic = reader.int_tuple("tactic", LOW_LATENCY_TACTIC_PARTS)
    reader.reject_unknown(("n", "k", "tile", "tactic"))
    if tile is not None and tile % 8:
        reader.problem("tile", tile, "must be a multiple of 8")
        return None
    if n is None or k is None or tile is None or tactic is None:
        return None
    return WidePin(n, k, tile, (tactic[0], tactic[1], tactic[2], tactic[3]), index)


def check_wide_duplicates(
    section: str, entries: Sequence[WidePin], source: str, problems: list[PinProblem]
) -> Sequence[WidePin]:
    """Record a problem for each ``(n, k, tile)`` pinned twice."""
    seen: dict[tuple[int, int, int], WidePin] = {}
    for entry in entries:
        key = (entry.n, entry.k, entry.tile)
        if key in seen:
            problems.append(
                PinProblem(
                    source,
                    f"[[{section}]] #{entry.index}",
                    "tile",
                    entry.tile,
                    f"n={entry.n} k={entry.k} tile={entry.tile} is already pinned by entry "
                    f"#{seen[key].index}",
                )
            )
        else:
            seen[key] = entry
    return entries


@dataclass(frozen=True)
class CuteDslPin(RowRangePin):
    """A ``cute-dsl`` ``mm_mxfp8`` tactic for one weight shape and row range."""

    SECTION: ClassVar[str] = "cute_dsl"
    tactic: CuteDslTactic

    def to_mapping(self) -> dict[str, Any]:
        (tm, tn), (cm, cn), swap_ab, prefetch, split_k = self.tactic
        return {
            "n": self.n,
            "k": self.k,
            "min_rows": self.min_rows,
            "max_rows": self.max_rows,
            "tactic": [[tm, tn], [cm, cn], swap_ab, prefetch, split_k],
        }


def _int_pair(value: object, hi: int) -> tuple[int, int] | None:
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= hi for v in value)
    ):
        return (value[0], value[1])
    return None


def parse_cute_dsl_tactic(value: object) -> CuteDslTactic | None:
    """``[[mma_m, mma_n], [cluster_m, cluster_n], swap_ab, use_prefetch, split_k]`` as a tactic."""
    if not isinstance(value, (list, tuple)) or len(value) != 5:
        return None
    tiler, cluster = _int_pair(value[0], TILER_MAX), _int_pair(value[1], CLUSTER_MAX)
    swap_ab, prefetch, split_k = value[2], value[3], value[4]
    if tiler is None or cluster is None:
        return None
    if not isinstance(swap_ab, bool) or not isinstance(prefetch, bool):
        return None
    if isinstance(split_k, bool) or not isinstance(split_k, int) or not 1 <= split_k <= STAGES_MAX:
        return None
    return (tiler, cluster, swap_ab, prefetch, split_k)


CUTE_DSL_TACTIC_FORM = (
    "[[mma_m, mma_n], [cluster_m, cluster_n], swap_ab, use_prefetch, split_k] "
    f"(mma sizes 1..{TILER_MAX}, cluster sizes and split_k 1..{STAGES_MAX})"
)

# min_rows of a [[cute_dsl]] entry may be left out: the range then starts after the previous
# entry (in max_rows order) of the same shape, as a list of "up to max_rows" ranges reads.
_IMPLICIT_MIN = 0


def _parse_cute_dsl(reader: FieldReader, index: int) -> CuteDslPin | None:
    n = reader.integer("n", lo=1, hi=N_MAX)
    k = reader.integer("k", lo=1, hi=K_MAX)
    min_rows = reader.integer("min_rows", lo=1, hi=ROWS_MAX, default=_IMPLICIT_MIN)
    max_rows = reader.integer("max_rows", lo=1, hi=ROWS_MAX)
    tactic = reader.parsed("tactic", parse_cute_dsl_tactic, CUTE_DSL_TACTIC_FORM)
    reader.reject_unknown(("n", "k", "min_rows", "max_rows", "tactic"))
    if min_rows and max_rows is not None and min_rows > max_rows:
        reader.problem("min_rows", min_rows, f"must not exceed max_rows ({max_rows})")
        return None
    if n is None or k is None or min_rows is None or max_rows is None or tactic is None:
        return None
    return CuteDslPin(n, k, min_rows, max_rows, index, tactic)


def _fill_implicit_min_rows(entries: list[Any]) -> list[Any]:
    """Give each ``[[cute_dsl]]`` entry without ``min_rows`` the row after its predecessor's."""
    filled = list(entries)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for position, entry in enumerate(entries):
        by_shape.setdefault((entry.n, entry.k), []).append(position)
    for positions in by_shape.values():
        previous_max = 0
        for position in sorted(positions, key=lambda p: entries[p].max_rows):
            entry = entries[position]
            if entry.min_rows == _IMPLICIT_MIN:
                entry = dataclasses.replace(entry, min_rows=previous_max + 1)
                filled[position] = entry
            previous_max = entry.max_rows
    return filled


def check_cute_dsl(
    section: str, entries: Sequence[Any], source: str, problems: list[PinProblem]
) -> Sequence[Any]:
    """Fill implicit ``min_rows``, then reject overlapping ranges; returns the filled entries."""
    filled = _fill_implicit_min_rows(list(entries))
    for entry in filled:
        if entry.min_rows > entry.max_rows:
            problems.append(
                PinProblem(
                    source,
                    f"[[{section}]] #{entry.index}",
                    "max_rows",
                    entry.max_rows,
                    "repeats the previous entry's rows "
                    f"(this range would start at {entry.min_rows})",
                )
            )
    check_row_overlaps(section, [e for e in filled if e.min_rows <= e.max_rows], source, problems)
    return filled


def check_row_overlaps(
    section: str, entries: Sequence[RowRangePin], source: str, problems: list[PinProblem]
) -> Sequence[RowRangePin]:
    """Record a problem for every pair of entries of one weight shape whose row ranges overlap."""
    by_shape: dict[tuple[int, int], list[RowRangePin]] = {}
    for entry in entries:
        by_shape.setdefault((entry.n, entry.k), []).append(entry)
    for (n, k), group in by_shape.items():
        group.sort(key=lambda e: (e.min_rows, e.max_rows))
        for previous, current in itertools.pairwise(group):
            if current.min_rows <= previous.max_rows:
                problems.append(
                    PinProblem(
                        source,
                        f"[[{section}]] #{current.index}",
                        "min_rows",
                        current.min_rows,
                        f"rows {current.rows_text} overlap entry #{previous.index}'s rows "
                        f"{previous.rows_text} for n={n} k={k}",
                    )
                )
    return entries


@dataclass(frozen=True)
class Section:
    """One array of pins: its name in the file and its parser (the feature that applies it
    names it in ``fi_patches.compat.features``)."""

    name: str
    parse: Callable[[FieldReader, int], Any]
    cross_check: Callable[[str, Sequence[Any], str, list[PinProblem]], Sequence[Any]] | None = None
    """Checks across entries (overlaps, duplicates); returns the entries, completed."""


SECTIONS: dict[str, Section] = {
    "low_latency": Section("low_latency", _parse_low_latency, check_row_overlaps),
    "wide": Section("wide", _parse_wide, check_wide_duplicates),
    "cute_dsl": Section("cute_dsl", _parse_cute_dsl, check_cute_dsl),
    PIN_SECTION: Section(PIN_SECTION, parse_pin, check_pins),
}
