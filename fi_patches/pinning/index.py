"""The merged index of the pins in force in one scope: per runner class, the ``[[pin]]`` keys and
the section specializations that pin it, so the engine's wrappers answer "which pin serves this
call?" for every op in a few dict lookups (most calls find no pin at the first).

Entries keep the priority of the tables they came from (innermost block first); an entry from a
``mode="preseed"`` block is marked so, and the tuner-cache wrapper answers its key itself.

The MXFP8 sections are specializations of the engine (:class:`Specialization`): the runner
classes each pins, the ops it serves, and how a call's inputs name its problem (weight ``n``,
``k`` and activation rows), so one narrowing wrapper and one tuner-cache wrapper serve them
beside ``[[pin]]`` entries. A ``[[pin]]`` names FlashInfer's key directly; a section names a
problem in the model's terms (weight shape, row range, tile) and its specialization finds the
entry for a call. Both answer with the tactic in the runner's own form.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

from fi_patches.internals import flashinfer as fi
from fi_patches.pins.keys import SECTION as PIN_SECTION
from fi_patches.pins.keys import ShapePattern, TunerPin, as_tactic
from fi_patches.pins.schema import WIDE_OP, WIDE_RUNNER
from fi_patches.pins.table import REFRESHED, covering

Problem = tuple[int, int, int]
"""``(n, k, rows)``: the weight's output features, its input features, the activation rows."""

Shapes = Sequence[Sequence[int]]


def _dims(inputs: Sequence[Any], shapes: Shapes | None, index: int) -> Sequence[int]:
    return shapes[index] if shapes is not None else inputs[index].shape


def mxfp8_problem(inputs: Sequence[Any], shapes: Shapes | None = None) -> Problem | None:
    """The MXFP8 problem of ``mm_mxfp8``'s 7 runner inputs ``[a (rows, K), b (K, N), a_scale,
    b_scale, out_dtype, out, workspace]``, also accepting the low-latency kernel's 9 native
    ones ``[A (N, K), B (rows, K), sfa, sfb, C, workspace, mnkl, alpha, bias]``. FP4 (10
    inputs) and FP8 with E4M3 scales are not MXFP8 and are never pinned."""
    import torch

    if len(inputs) == 7:
        a, b = inputs[0], inputs[1]
        if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
            return None
        a_dims, b_dims = _dims(inputs, shapes, 0), _dims(inputs, shapes, 1)
        return int(b_dims[1]), int(a_dims[1]), int(a_dims[0])
    if len(inputs) == 9:
        weight, act, sfa = inputs[0], inputs[1], inputs[2]
        if (
            weight.dtype != torch.float8_e4m3fn
            or act.dtype != torch.float8_e4m3fn
            or sfa.dtype != torch.float8_e8m0fnu
        ):
            return None
        w_dims, a_dims = _dims(inputs, shapes, 0), _dims(inputs, shapes, 1)
        return int(w_dims[0]), int(w_dims[1]), int(a_dims[0])
    return None


def _row_range_pin(group: Sequence[Any], problem: Problem, runner: Any) -> tuple[Any, Any] | None:
    entry = covering(group, problem[2])
    return None if entry is None else (entry, entry.tactic)


def _wide_pin(group: Sequence[Any], problem: Problem, runner: Any) -> tuple[Any, Any] | None:
    tile_for = getattr(runner, "tile_for", None)
    if tile_for is None:
        return None
    tile = tile_for(problem[2])
    for entry in group:
        if entry.tile == tile:
            return entry, (tile, *entry.tactic)
    return None


@dataclass(frozen=True)
class Specialization:
    """How one pin-table section pins FlashInfer's tuner."""

    section: str
    runners: tuple[str, ...]
    """The runner classes (by name, as FlashInfer's keys name them) it pins."""
    ops: tuple[str, ...] | None
    """The custom ops it serves; None for any (the low-latency runner serves several)."""
    weight_inputs: dict[int, tuple[int, bool]]
    """Per input-list length: which input holds the weight, and whether its shape reads
    ``(k, n)`` (a column-major view) rather than ``(n, k)``. The hot path's one test is a dict
    lookup of that tensor's ``shape``, since most problems are not pinned."""
    problem: Callable[[Sequence[Any], Shapes | None], Problem | None]
    """``(n, k, rows)`` of a call from the runner's inputs (``shapes`` override the tensors'
    shapes, as the tuner's cache lookups pass them), or None for other dtypes."""
    pin_for: Callable[[Sequence[Any], Problem, Any], tuple[Any, Any] | None]
    """``(entry, tactic in the runner's form)`` of a weight's entries (priority order) for a
    problem and the runner asked, or None."""
    recorded_ops: tuple[str, ...] = ()
    """The custom ops whose cached winners of these runners ``pins record`` writes as this
    section's entries (other ops' keys stay ``[[pin]]`` entries)."""
    silences: tuple[str, ...] = ()
    """Runner classes that serve the same op with tactics of another form (FlashInfer's warp
    split-K runner beside the cute-dsl one): for a pinned problem they offer nothing, so the
    tuner profiles the pin alone."""

    def normalize(self, tactic: Any) -> Any:
        """A tactic as the table spells it (JSON-loaded caches hold lists, not tuples)."""
        return as_tactic(tactic)


LOW_LATENCY = Specialization(
    "low_latency",
    (fi.LOW_LATENCY_RUNNER.builds,),
    None,
    {7: (1, True), 9: (0, False)},  # mm_mxfp8's b is the (K, N) view; native A is (N, K)
    mxfp8_problem,
    _row_range_pin,
    recorded_ops=(fi.MXFP8_OP,),
)

CUTE_DSL = Specialization(
    "cute_dsl",
    (fi.CUTE_DSL_RUNNER.builds,),
    (fi.MXFP8_OP,),
    {7: (1, True)},
    mxfp8_problem,
    _row_range_pin,
    recorded_ops=(fi.MXFP8_OP,),
    silences=(fi.CUTE_DSL_WARP_RUNNER.builds,),
)

WIDE = Specialization(
    "wide",
    (WIDE_RUNNER,),
    (WIDE_OP,),
    {7: (1, True)},
    mxfp8_problem,
    _wide_pin,
    recorded_ops=(WIDE_OP,),
)

SPECIALIZATIONS: tuple[Specialization, ...] = (LOW_LATENCY, CUTE_DSL, WIDE)


def runner_names(table: Any) -> tuple[str, ...]:
    """The runner classes whose ``get_valid_tactics`` pinning ``table`` wraps."""
    from fi_patches.pins.keys import SECTION

    names: dict[str, None] = {}
    for entry in table.entries(SECTION):
        names[entry.runner] = None
    for spec in SPECIALIZATIONS:
        if table.entries(spec.section):
            names.update(dict.fromkeys((*spec.runners, *spec.silences)))
    return tuple(names)


NARROW, PRESEED = "narrow", "preseed"


class SectionIndex:
    """One section's active entries by weight shape, in priority order."""

    __slots__ = ("by_kn", "by_nk")

    def __init__(self, by_nk: dict[Any, tuple[Any, ...]]) -> None:
        self.by_nk = by_nk
        """``(n, k)`` (a tensor's ``shape`` matches it as it is) -> entries."""
        self.by_kn: dict[Any, tuple[Any, ...]] = {(k, n): g for (n, k), g in by_nk.items()}


@dataclass
class _KeyGroup:
    """``[[pin]]`` entries whose shapes blank the same dimensions, keyed by what is left."""

    template: ShapePattern
    by_op: dict[tuple[str, Any], list[tuple[int, TunerPin]]] = field(default_factory=dict)
    any_op: dict[Any, list[tuple[int, TunerPin]]] = field(default_factory=dict)
    probe: tuple[int, int] | None = None
    """A fixed dimension ``(input, dim)`` whose value the hot path reads first."""
    probe_values: frozenset[int] = frozenset()
    """Its values among the group's entries: a call with another value has no pin here."""
    by_probe: dict[int, list[tuple[int, TunerPin]]] = field(default_factory=dict)
    """The entries by their value of the probed dimension, priority order."""

    def admits(self, inputs: Any) -> bool:
        """Whether a call's inputs may match an entry (a cheap test of one dimension)."""
        if self.probe is None:
            return True
        i, j = self.probe
        if i >= len(inputs):
            return False
        shape = getattr(inputs[i], "shape", None)
        if shape is None or j >= len(shape):
            return False
        return shape[j] in self.probe_values

    def choose_probe(self) -> None:
        """Probe the fixed dimension whose values tell the entries apart best."""
        fixed = list(self.any_op)
        best: tuple[int, tuple[int, int] | None, frozenset[int]] = (0, None, frozenset())
        for i, shape in enumerate(self.template.fixed()):
            for j, value in enumerate(shape):
                if value is None or value == 0:
                    continue
                values = frozenset(int(k[i][j]) for k in fixed)
                if len(values) > best[0]:
                    best = (len(values), (i, j), values)
        self.probe, self.probe_values = best[1], best[2]
        for entries in self.any_op.values():
            for rank, pin in entries:
                value = (
                    0 if self.probe is None else pin.shapes.fixed()[self.probe[0]][self.probe[1]]
                )
                self.by_probe.setdefault(int(value or 0), []).append((rank, pin))
        for found in self.by_probe.values():
            found.sort(key=lambda item: item[0])


@dataclass
class ClassPins:
    """What pins one runner class: section specializations and ``[[pin]]`` key groups."""

    specs: list[Specialization] = field(default_factory=list)
    groups: list[_KeyGroup] = field(default_factory=list)
    sections: list[tuple[Specialization, SectionIndex]] = field(default_factory=list)
    """Each spec with its section's entries."""


Probe = tuple[int, frozenset[Any] | None]
"""The hot path's one test of a call of ``len(inputs)`` inputs, ``(input, shapes)``: the call
may be pinned only if ``inputs[input].shape`` is in ``shapes``; ``shapes`` None means every
call takes the full search."""


Reach = tuple[Any, int, int, frozenset[Any]]
"""``(tuning config, input count, input, shapes)``: a serving lookup of the op under that very
config with that many inputs may be pinned only if the call's shape of ``input`` is in
``shapes``."""


def _free(pattern: ShapePattern) -> tuple[Any, ...]:
    return tuple(tuple(d is None for d in shape) for shape in pattern.fixed())


class _EveryOp:
    """Holds every op (what a section serving any op serves)."""

    def __contains__(self, op: object) -> bool:
        return True


EVERY_OP = _EveryOp()


MISS = object()
"""What :meth:`Memo.recall` returns for a call it does not remember."""


class Memo(dict[Any, Any]):
    """A dict that starts again past :data:`MEMO_MAX` rows (keys name calls, and a server makes
    calls of ever new row counts)."""

    def remember(self, key: Any, value: Any) -> Any:
        if len(self) >= MEMO_MAX:
            self.clear()
        self[key] = value
        return value

    def keep(self, key: Any, owner: Any, value: Any) -> None:
        """Remember ``value`` for ``key``, which names ``owner`` by id, holding it weakly: a
        runner a row names stays free to go (before 0.7.4 FlashInfer builds one, and its class,
        per call)."""
        try:
            ref = weakref.ref(owner)
        except TypeError:  # an owner that takes no weak reference: not remembered
            return
        self.remember(key, (ref, value))

    def recall(self, key: Any, owner: Any) -> Any:
        """The value kept for ``key`` if ``owner`` is the very object it was kept for (an id
        outlives its object), else :data:`MISS`."""
        row = self.get(key)
        if row is None or row[0]() is not owner:
            return MISS
        return row[1]


MEMO_MAX = 4096
"""Rows a :class:`Memo` keeps before starting again."""


UNLEARNED: Reach = (None, -1, 0, frozenset())
"""The reach of a served op none is learned for: every lookup of it reads the memo."""

UNSERVED: Reach = (None, -2, 0, frozenset())
"""The reach of an op no pin of the index may apply to: its lookups go straight to FlashInfer
(told apart from :data:`UNLEARNED` by identity)."""


class ReachMap(Memo):
    """Op -> its :data:`Reach`, read with ``[op]`` on every serving lookup: one C-level read
    answers both whether any pin here may apply to the op and, for one that may, its learned
    test. An op no pin applies to reads :data:`UNSERVED` (kept from its first lookup on: an
    index's ops never change), a served op not learned yet :data:`UNLEARNED`. A set of every op
    (a section serving any op) would cost a Python call per lookup. Bounded as any memo (a
    host may build op names at run time)."""

    __slots__ = ("served",)

    def __init__(self) -> None:
        super().__init__()
        self.served: Container[str] = frozenset()
        """The ops a pin of the index may apply to (every op, where a section serves any); set
        once, when the index is merged."""

    def __missing__(self, op: str) -> Reach:
        if op in self.served:
            return UNLEARNED
        return self.remember(op, UNSERVED)  # type: ignore[no-any-return]


class PinIndex:
    """The pins of one scope's tables, merged (see the module docstring)."""

    __slots__ = (
        "answers",
        "at",
        "classes",
        "lookups",
        "modes",
        "ops",
        "probes",
        "rank",
        "reach",
        "section_ops",
        "sections",
        "silenced",
    )

    def __init__(self) -> None:
        self.sections: dict[str, SectionIndex] = {}
        self.classes: dict[str, ClassPins] = {}
        self.ops: frozenset[str] = frozenset()
        """Ops of ``[[pin]]`` entries."""
        self.section_ops: frozenset[str | None] = frozenset()
        """Ops the sections with entries serve (None: any op)."""
        self.silenced: dict[str, list[Specialization]] = {}
        """Runner class -> the specializations whose pins silence it."""
        self.modes: dict[int, str] = {}
        """``id(entry)`` -> the mode of the block it came from (absent: narrow)."""
        self.rank: dict[int, tuple[int, int]] = {}
        """``id(entry)`` -> ``(table, order)``: its table's place (0: the innermost) and its
        place among every entry here, across sections and runners."""
        self.at = REFRESHED[0]
        """The refresh generation the memos below were filled in (:meth:`fresh`)."""
        self.answers = Memo()
        """What the engine's wrappers decided here for a call's signature (a direct call of a
        runner): these pins decide the same again for it."""
        self.lookups = Memo()
        """Serving lookups (``search_cache`` outside tuning) decided here, by what FlashInfer
        passes: ``(op, input shapes)`` -> ``(runners held weakly, input kinds, answer, check)``
        (see :mod:`fi_patches.pinning.tuner_cache`)."""
        self.reach = ReachMap()
        """Op -> the :data:`Reach` its serving lookups last learned, or that no pin here may
        apply to it (see :mod:`fi_patches.pinning.tuner_cache`)."""
        self.probes: dict[str, dict[int, Probe]] = {}
        """Runner class -> per input-list length, the :data:`Probe` that every call pinned or
        silenced here passes and most other calls fail (see :mod:`fi_patches.pinning.stack`)."""

    @property
    def served(self) -> Container[str]:
        """The ops a pin here may apply to (every op, where a section serves any): kept once,
        by the reach map, which tells them apart on every serving lookup."""
        return self.reach.served

    def fresh(self) -> PinIndex:
        """This index, its memos of decided calls emptied first if ``fi_patches.refresh()``
        moved the refresh counter since they were filled (the pin-state caches' one scheme: a
        counter read on use; a runner's stock list may differ once probed again)."""
        now = REFRESHED[0]
        if self.at != now:
            self.answers = Memo()
            self.lookups = Memo()
            self.at = now
        return self


_merged: dict[tuple[tuple[Any, str], ...], PinIndex] = {}
"""Indexes by their ``(table, mode)`` pairs (a function of the tables alone; what an index
remembers of calls holds for one refresh generation, see :meth:`PinIndex.fresh`)."""
_MERGED_MAX = 256
_merged_lock = threading.Lock()


def merge(tables: Sequence[tuple[Any, str]]) -> PinIndex:
    """The index of ``(table, mode)`` pairs, highest priority first (the same tables, by
    identity, share one index: entering a block of a large lockfile merges it once)."""
    key = tuple(tables)
    with _merged_lock:
        found = _merged.get(key)
    if found is None:
        found = _merge(key)
        with _merged_lock:
            if len(_merged) >= _MERGED_MAX:
                _merged.clear()
            _merged[key] = found
    return found


def _merge(tables: Sequence[tuple[Any, str]]) -> PinIndex:
    index = PinIndex()
    by_section: dict[str, dict[tuple[int, int], list[Any]]] = {}
    ops: set[str] = set()
    for place, (table, mode) in enumerate(tables):
        for section, entries in table.sections.items():
            for entry in entries:
                if id(entry) in index.rank:  # the same table held twice: its first place counts
                    continue
                rank = len(index.rank)
                index.rank[id(entry)] = (place, rank)
                index.modes[id(entry)] = PRESEED if mode == PRESEED else NARROW
                if section == PIN_SECTION:
                    _add_pin(index, rank, entry)
                    ops.add(entry.op)
                elif hasattr(entry, "n"):
                    by_section.setdefault(section, {}).setdefault((entry.n, entry.k), []).append(
                        entry
                    )
    index.ops = frozenset(ops)
    for pins in index.classes.values():
        for group in pins.groups:
            group.choose_probe()
    index.sections = {
        section: SectionIndex({shape: tuple(group) for shape, group in shapes.items()})
        for section, shapes in by_section.items()
    }
    section_ops: set[str | None] = set()
    for spec in SPECIALIZATIONS:
        if spec.section not in index.sections:
            continue
        section_ops.update(spec.ops if spec.ops is not None else (None,))
        for name in spec.runners:
            pins = index.classes.setdefault(name, ClassPins())
            pins.specs.append(spec)
            pins.sections.append((spec, index.sections[spec.section]))
        for name in spec.silences:
            index.silenced.setdefault(name, []).append(spec)
    index.section_ops = frozenset(section_ops)
    index.reach.served = (
        EVERY_OP if None in section_ops else index.ops | {op for op in section_ops if op}
    )
    index.probes = _probes(index)
    index.modes = {k: v for k, v in index.modes.items() if v == PRESEED}
    return index


def _probes(index: PinIndex) -> dict[str, dict[int, Probe]]:
    """Per runner class and input-list length, one test that every call the index pins or
    silences passes: the sections' weight shapes, and for each ``[[pin]]`` group the shape of
    an input its entries fix whole (a group without one makes its length search every call)."""
    tests: dict[str, dict[int, list[Probe]]] = {}

    def add_sections(name: str, spec: Specialization, entries: SectionIndex) -> None:
        for length, (position, kn) in spec.weight_inputs.items():
            shapes = frozenset(entries.by_kn if kn else entries.by_nk)
            tests.setdefault(name, {}).setdefault(length, []).append((position, shapes))

    for name, pins in index.classes.items():
        for spec, entries in pins.sections:
            add_sections(name, spec, entries)
        for group in pins.groups:
            length = len(group.template.dims)
            taken = {at for at, _ in tests.get(name, {}).get(length, ())}
            candidates = _group_tests(group)
            chosen = next((c for c in candidates if c[0] in taken), candidates[0])
            tests.setdefault(name, {}).setdefault(length, []).append(chosen)
    for name, specs in index.silenced.items():
        for spec in specs:
            add_sections(name, spec, index.sections[spec.section])
    return {
        name: {length: combine(found) for length, found in lengths.items()}
        for name, lengths in tests.items()
    }


def combine(tests: Sequence[Probe]) -> Probe:
    """One probe that every call passing any of ``tests`` passes: their shapes' union when
    they read the same input, else the full search for every call."""
    places = {at for at, _ in tests}
    if len(places) == 1 and all(shapes is not None for _, shapes in tests):
        return (places.pop(), frozenset().union(*(v for _, v in tests if v is not None)))
    return (0, None)


def _group_tests(group: _KeyGroup) -> list[Probe]:
    """The tests a ``[[pin]]`` group's calls pass: one per input whose shape its entries fix
    whole, then the full search."""
    keys = list(group.any_op)
    out: list[Probe] = []
    for i, shape in enumerate(group.template.fixed()):
        if shape and all(d is not None and d != 0 for d in shape):
            out.append((i, frozenset(tuple(int(d) for d in k[i]) for k in keys)))
    out.append((0, None))
    return out


def section_weights(
    index: PinIndex, op: str, length: int
) -> list[tuple[int, dict[Any, tuple[Any, ...]]]]:
    """For each section here whose specialization serves ``op`` with ``length`` inputs: the
    input that holds the weight, and the section's entries by that input's shape as a call
    has it."""
    out = []
    for spec in SPECIALIZATIONS:
        found = index.sections.get(spec.section)
        form = spec.weight_inputs.get(length)
        if found is None or form is None or (spec.ops is not None and op not in spec.ops):
            continue
        out.append((form[0], found.by_kn if form[1] else found.by_nk))
    return out


def reach_test(
    index: PinIndex, op: str, length: int, shaped: Container[int]
) -> tuple[int, frozenset[Any]] | None:
    """One test that every serving lookup of ``op`` with ``length`` inputs that an entry here
    could pin passes, on the call's own shape of one input: a section's weight, or for a
    ``[[pin]]`` group an input its entries fix whole and FlashInfer's key profile keeps as the
    call's (not in ``shaped``, see :func:`fi_patches.internals.tuner.shaped_inputs`). None
    where no one input serves every entry (with no entry for such calls, any input rules
    every call out)."""
    options: list[list[Probe]] = [
        [(at, frozenset(by_shape))] for at, by_shape in section_weights(index, op, length)
    ]
    for pins in index.classes.values():
        for group in pins.groups:
            if len(group.template.dims) == length and any(o == op for o, _ in group.by_op):
                tests = _group_tests(group)
                options.append([t for t in tests if t[1] is not None and t[0] not in shaped])
    for position in range(length):
        chosen = [next((t[1] for t in tests if t[0] == position), None) for tests in options]
        if all(shapes is not None for shapes in chosen):
            return (position, frozenset().union(*(s for s in chosen if s is not None)))
    return None


def _add_pin(index: PinIndex, rank: int, pin: TunerPin) -> None:
    pins = index.classes.setdefault(pin.runner, ClassPins())
    free = _free(pin.shapes)
    group = next((g for g in pins.groups if _free(g.template) == free), None)
    if group is None:
        group = _KeyGroup(pin.shapes)
        pins.groups.append(group)
    fixed = pin.shapes.fixed()
    group.by_op.setdefault((pin.op, fixed), []).append((rank, pin))
    group.any_op.setdefault(fixed, []).append((rank, pin))


def section_hit(
    index: PinIndex,
    spec: Specialization,
    runner: Any,
    inputs: Sequence[Any] | None,
    shapes: Sequence[Sequence[int]] | None = None,
) -> tuple[Any, Any, Any] | None:
    """``(entry, tactic, problem)`` of the section pin for a call of ``runner`` on ``inputs``
    (``shapes`` override theirs), or None."""
    found = index.sections.get(spec.section)
    if found is None or inputs is None:
        return None
    form = spec.weight_inputs.get(len(inputs))
    if form is None:
        return None
    weight = shapes[form[0]] if shapes is not None else inputs[form[0]].shape
    group = (found.by_kn if form[1] else found.by_nk).get(tuple(weight))
    if not group:
        return None
    problem = spec.problem(inputs, shapes)
    hit = None if problem is None else spec.pin_for(group, problem, runner)
    return None if hit is None else (hit[0], hit[1], problem)


def key_hits(
    groups: Sequence[_KeyGroup],
    op: str | None,
    profile: Sequence[Sequence[int]],
    extras: Callable[[], str | None] | None,
) -> list[TunerPin]:
    """Every ``[[pin]]`` of ``groups`` for a call of ``op`` (None: any op) at the key profile
    ``profile``, highest priority first; ``extras`` gives the runner's extras text (None, or a
    None answer: unchecked)."""
    hits: list[tuple[int, TunerPin]] = []
    extras_text: list[str | None] = []
    for group in groups:
        masked = group.template.masked(profile)
        if masked is None:
            continue
        found = group.by_op.get((op, masked)) if op is not None else group.any_op.get(masked)
        for rank, pin in found or ():
            rows = pin.shapes.rows_of(profile)
            if rows is None or not pin.covers(rows):
                continue
            if pin.extras is not None and extras is not None:
                if not extras_text:
                    extras_text.append(extras())
                if extras_text[0] is not None and extras_text[0] != pin.extras:
                    continue
            hits.append((rank, pin))
    hits.sort(key=lambda item: item[0])
    return [pin for _, pin in hits]


def direct_hit(
    groups: Sequence[_KeyGroup], inputs: Sequence[Any], extras: Callable[[], str]
) -> tuple[TunerPin, int] | None:
    """The highest-priority ``[[pin]]`` for a direct call (outside a tuning ``choose_one``: any
    op, the inputs' shapes as they are), read off the inputs without building a profile."""
    best: tuple[int, TunerPin, int] | None = None
    extras_text: list[str] = []
    for group in groups:
        if not group.admits(inputs):
            continue
        value = 0 if group.probe is None else inputs[group.probe[0]].shape[group.probe[1]]
        for rank, pin in group.by_probe.get(int(value), ()):
            if best is not None and best[0] <= rank:
                break
            rows = pin.shapes.rows_of_inputs(inputs)
            if rows is None or not pin.covers(rows):
                continue
            if pin.extras is not None:
                if not extras_text:
                    extras_text.append(extras())
                if extras_text[0] != pin.extras:
                    continue
            best = (rank, pin, rows)
            break
    return None if best is None else (best[1], best[2])
