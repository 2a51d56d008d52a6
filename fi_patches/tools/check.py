"""Check a pin table against the installed FlashInfer and device, entry by entry: each tactic
valid for its problem and row range, and the meta against what is installed.

Whether a ``[[pin]]``'s tactic is one its runner offers for the entry's keys, checked where
this process can have that runner's list: a runner of the entry's class that is live here (the
model ran in this process, and check is called from Python), or one of a class of the
consumer's own that check can make with no arguments (it never makes FlashInfer's own runners:
making one may load or build its kernels). Elsewhere the entry stays unchecked, and its reason
names the runner and why its list cannot be had here: FlashInfer builds that class inside a
factory and check makes no runner, its constructor needs arguments, or listing raised (most
runners need their GPU).

A key's inputs are built from its profile: float32 tensors of the key's shapes, views of one
element (no memory), on the CUDA device where there is one. A runner whose extras for those
inputs are not the entry's is not asked: its list for the entry's key cannot be had that way.
"""

from __future__ import annotations

import gc
import inspect
from dataclasses import dataclass
from typing import Any

from fi_patches._text import error_text, value_text
from fi_patches.pins.keys import TunerPin, as_tactic, extras_text, tactic_text
from fi_patches.pins.schema import SECTIONS
from fi_patches.pins.table import PinTable

OK, INVALID, UNCHECKED = "OK", "invalid", "unchecked"


@dataclass(frozen=True)
class EntryCheck:
    """One entry's verdict: ``state`` is OK, invalid or unchecked, with the reason."""

    section: str
    index: int
    shape: str
    rows: str
    tactic: Any
    state: str
    reason: str
    applies: bool = False
    """Whether the entry applies here: OK, or a ``[[pin]]`` whose runner and op the installed
    FlashInfer has but whose tactic only the tuner can list here."""


def _describe(section: str, entry: Any) -> tuple[str, str]:
    if not hasattr(entry, "n"):  # a [[pin]]: its op, runner and shapes
        return f"{entry.op} {entry.runner} {entry.shapes.text()}", entry.rows_text
    shape = f"{entry.n}x{entry.k}"
    if hasattr(entry, "rows_text"):
        return shape, entry.rows_text
    return shape, f"tile {entry.tile}"


def check_meta(table: PinTable) -> tuple[str, str]:
    """``(state, line)`` of the table's ``[meta]`` here (``line`` as ``pins check`` prints it):
    invalid when it was chosen on another device, unchecked when this machine's device cannot
    be known (no CUDA device and no ``FI_PATCHES_DEVICE``): a table is not wrong for a device
    nobody named."""
    from fi_patches.compat.features import installed_flashinfer
    from fi_patches.compat.target import current_device

    device = current_device()
    if device.arch is None and table.meta.device != "*":
        return UNCHECKED, (
            f"unchecked: pins in {table.source} were chosen on {table.meta.device}; which device "
            f"this is cannot be known here ({device.absence}; FI_PATCHES_DEVICE names it)"
        )
    problem = table.skip_reason(device.arch, installed_flashinfer().version)
    return (INVALID, problem) if problem else (OK, OK)


def check_entries(table: PinTable) -> tuple[str | None, list[EntryCheck]]:
    """The meta problem (or None: see :func:`check_meta` for an unchecked meta) and a verdict
    per entry."""
    from fi_patches.compat.features import feature_of_section, status_of
    from fi_patches.pinning.validate import checked_sections, checker_of

    runners = Runners()
    meta_state, meta_reason = check_meta(table)
    meta_problem = meta_reason if meta_state == INVALID else None
    results: list[EntryCheck] = []
    for name in SECTIONS:
        entries = table.entries(name)
        if not entries:
            continue
        owner = feature_of_section(name).name
        record = status_of(owner)
        checker = checker_of(name) if name in checked_sections() else None
        problems: dict[int, str] = {}
        unchecked = None
        if not record.enabled:
            unchecked = f"{owner} is disabled here: {record.reason}"
        elif checker is None:
            unchecked = "no check exists for this section"
        else:
            found = checker(table)
            if name == "pin":
                from fi_patches.pinning.validate import check_pins

                found = check_pins(table, thorough=True)
            for problem in found:
                index = int(problem.where.rsplit("#", 1)[1])
                problems.setdefault(index, problem.detail())
        for entry in entries:
            shape, rows = _describe(name, entry)
            tactic = value_text(entry.to_mapping()["tactic"])
            applies = False
            if unchecked is not None:
                state, reason = UNCHECKED, unchecked
            elif entry.index in problems:
                state, reason = INVALID, problems[entry.index]
            elif name == "pin":
                state, reason, applies = _membership(table, entry, runners)
            else:
                unreached = _unreached(name, entry)
                state, reason, applies = OK, f"warning: {unreached}" if unreached else "", True
            results.append(
                EntryCheck(name, entry.index, shape, rows, tactic, state, reason, applies)
            )
    return meta_problem, results


def _membership(table: PinTable, entry: Any, runners: Any) -> tuple[str, str, bool]:
    """``(state, reason, applies)`` of a ``[[pin]]`` whose runner and op are FlashInfer's: OK or
    invalid where a runner of its class can list its keys' tactics here, else unchecked (it
    applies, and the tuner checks it when it first lists the key) with why not."""
    from fi_patches.pins.keys import SECTION
    from fi_patches.pins.reading import PinProblem

    verdict = check(entry, runners)
    if verdict.member is None:
        return UNCHECKED, verdict.reason, True
    if verdict.member:
        return OK, verdict.reason, True
    where = f"[[{SECTION}]] #{entry.index}"
    problem = PinProblem(
        table.source, where, "tactic", entry.to_mapping()["tactic"], verdict.reason
    )
    return INVALID, problem.detail(), False


def _unreached(section: str, entry: Any) -> str | None:
    """Why no route can use a valid entry (a dead pin), or None. Only ``[[wide]]`` tiles can
    be dead: every low-latency range is served at <= 8 rows, and cute-dsl pins serve FlashInfer's
    own tuner whatever the router does."""
    if section != "wide":
        return None
    from fi_patches.mxfp8 import unreached_wide_tile

    return unreached_wide_tile(entry.tile)


@dataclass(frozen=True)
class OpPins:
    """How the ``[[pin]]`` entries of one op fare here: entries, those that apply, those invalid,
    and those not fully checked (a ``[[pin]]`` whose runner cannot list its tactics here applies
    unchecked)."""

    op: str
    entries: int
    applied: int
    invalid: int
    unchecked: int


def pins_per_op(table: PinTable) -> list[OpPins]:
    """Per op of ``table``'s ``[[pin]]`` entries, in op order, how many apply here."""
    from fi_patches.pins.keys import SECTION

    if not table.entries(SECTION):
        return []
    _, results = check_entries(table)
    by_op: dict[str, list[EntryCheck]] = {}
    entries = {e.index: e for e in table.entries(SECTION)}
    for result in results:
        if result.section == SECTION:
            by_op.setdefault(entries[result.index].op, []).append(result)
    return [
        OpPins(
            op,
            len(checks),
            sum(c.applies for c in checks),
            sum(c.state == INVALID for c in checks),
            sum(c.state == UNCHECKED for c in checks),
        )
        for op, checks in sorted(by_op.items())
    ]


DTYPE = "float32"
"""The dtype of the inputs a key's membership is checked with."""

MAX_SHOWN = 3
"""Offered tactics a reason shows as examples."""


@dataclass(frozen=True)
class Verdict:
    """``member`` True (offered for every key), False (not offered for ``rows``: the entry is
    invalid) or None (unchecked here), with the reason as a clause."""

    member: bool | None
    reason: str


@dataclass(frozen=True)
class _Runner:
    instance: Any
    how: str
    """How reasons name it: ``a live X`` or ``X() made by check``."""
    why_not: str = ""


class Runners:
    """The runners of this process by class name, each looked up once per check: a live
    instance first, else one made with no arguments, else why there is none."""

    def __init__(self) -> None:
        self._found: dict[str, _Runner] = {}

    def get(self, name: str) -> _Runner:
        if name not in self._found:
            self._found[name] = self._find(name)
        return self._found[name]

    def _find(self, name: str) -> _Runner:
        from fi_patches.internals import tuner as fi_tuner
        from fi_patches.patching import all_subclasses

        classes = [c for c in all_subclasses(fi_tuner.tunable_runner()) if c.__name__ == name]
        if not classes:
            return _Runner(None, "", _absent(name))
        live = _live_instance(classes)
        if live is not None:
            return _Runner(live, f"a live {name}")
        own = [c for c in classes if not _flashinfers(c)]
        if not own:
            return _Runner(
                None,
                "",
                f"no {name} is live in this process, and check makes none of FlashInfer's own "
                "runners (making one may load or build its kernels)",
            )
        problems = []
        for cls in own:
            needs = _required_parameters(cls)
            if needs:
                problems.append(f"its constructor needs {', '.join(needs)}")
                continue
            try:
                return _Runner(cls(), f"{name}() made by check")
            except Exception as exc:
                problems.append(f"{name}() raised {error_text(exc)}")
        return _Runner(
            None, "", f"no {name} is live in this process and check makes none ({problems[0]})"
        )


def _absent(name: str) -> str:
    """Why no class ``name`` is loaded: FlashInfer builds it in a factory, or its module is
    not imported here."""
    from fi_patches.internals.catalog import catalog

    found = catalog()
    defined = found.defined.get(name) if found is not None else None
    if defined is not None and defined.nested:
        return (
            f"FlashInfer builds {name} inside a factory function ({defined.file}), so none "
            "exists until its op runs in this process, and check makes no runner"
        )
    if defined is not None:
        return f"{name} ({defined.file}) is not loaded in this process, and check makes no runner"
    return f"no class {name} is loaded in this process, and check makes no runner"


def _flashinfers(cls: type) -> bool:
    """Whether ``cls`` is defined in FlashInfer's package."""
    from fi_patches.internals.flashinfer import FLASHINFER

    return str(cls.__module__).split(".")[0] == FLASHINFER.module


def _live_instance(classes: list[type]) -> Any:
    """A live instance of one of ``classes`` (what refers to a class: its instances among
    others), or None."""
    for found in gc.get_referrers(*classes):
        if type(found) in classes:
            return found
    return None


def _required_parameters(cls: type) -> list[str]:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def _inputs(profile: tuple[tuple[int, ...], ...]) -> list[Any]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    one = torch.zeros((), dtype=getattr(torch, DTYPE), device=device)
    return [one.expand(shape) for shape in profile]


def check(entry: TunerPin, runners: Runners) -> Verdict:
    """Whether ``entry``'s tactic is offered by a runner of its class for each of its keys (the
    ends of its row range and the powers of two between)."""
    from fi_patches.pinning import stack
    from fi_patches.tools.merge import pin_keys

    tactic = tactic_text(entry.tactic)
    later = (
        f"; whether tactic {tactic} is in {entry.runner}'s own list for this key is checked when "
        "the tuner first lists it (a pin it lacks gets the stock list and one error)"
    )
    runner = runners.get(entry.runner)
    if runner.instance is None:
        return Verdict(None, runner.why_not + later)
    keys = pin_keys(entry)
    if any(d < 0 for key in keys for shape in key.profile for d in shape):
        return Verdict(
            None,
            f"its shapes hold a dimension FlashInfer's tuner constrains (-1) or any value "
            f'matches ("*"), so check cannot build the inputs of its keys for {runner.how}' + later,
        )
    rows_checked = []
    for key in keys:
        rows = entry.shapes.rows_of(key.profile)
        at = f"rows {rows}" if entry.shapes.has_rows else "its key"
        try:
            inputs = _inputs(key.profile)
            with stack.isolated():  # the stock list, whatever blocks are open here
                if entry.extras is not None:
                    extras = extras_text(runner.instance.get_cache_key_extras(inputs))
                    if extras != entry.extras:
                        return Verdict(
                            None,
                            f"{runner.how} gives the {DTYPE} inputs check builds for {at} the "
                            f"extras {extras}, not the entry's {entry.extras}, so its list for "
                            "this key cannot be had here" + later,
                        )
                offered = [as_tactic(t) for t in runner.instance.get_valid_tactics(inputs, None)]
        except Exception as exc:
            return Verdict(
                None,
                f"{runner.how} could not list its tactics here (for {at}: {error_text(exc)})"
                + later,
            )
        if entry.tactic not in offered:
            sample = ", ".join(tactic_text(t) for t in offered[:MAX_SHOWN]) or "none"
            return Verdict(
                False,
                f"is not among the {len(offered)} tactics {runner.how} offers for {at} "
                f"(e.g. {sample})",
            )
        rows_checked.append(str(rows))
    where = f"rows {', '.join(rows_checked)}" if entry.shapes.has_rows else "its key"
    return Verdict(True, f"tactic {tactic} is among the tactics {runner.how} offers for {where}")
