"""``rank_guard()``: check that every rank of a process group runs fi_patches the same way
before they tune together, and raise, turn pins off, or warn when they do not.

FlashInfer's ``set_autotune_process_group`` makes the ranks all-reduce per-tactic timings, which
needs identical candidate lists on every rank. Pins decide those lists, so a rank with another
table, FlashInfer, device or feature state brings back the deadlock pins remove. The guard
compares each rank's :class:`Fingerprint` through the group's store (see
:mod:`fi_patches.ranks.exchange`), so it never waits longer than ``timeout``. Its information
fields (table paths, ``FI_PATCHES_*`` settings) are reported, never a mismatch.

A rank's :class:`Fingerprint` is what it contributes to the guard: the fields that decide which
tactics its tuner is offered (versions, device, feature states, the pin tables' content), compared
across ranks, and the fields reported as information only (the tables' sources, the ``FI_PATCHES_*``
settings), which cannot change a tactic. Two ranks with equal compared fields offer their tuners the
same candidate lists.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fi_patches._env import GUARD_MODES as MODES
from fi_patches._logging import get_logger
from fi_patches._text import cut
from fi_patches.ranks.exchange import (
    ExchangeError,
    ExchangeTimeout,
    GroupView,
    all_gather,
    group_view,
)

if TYPE_CHECKING:
    from fi_patches.pins.table import PinTable


logger = get_logger(__name__)

DEFAULT_TIMEOUT = 300.0
"""Seconds the guard waits for the other ranks: generous for ranks that load a model at
different speeds, and far below torch.distributed's own 30-minute default."""

NAMESPACE = "rank_guard"
_VALUE_CHARS = 160


class RankMismatchError(RuntimeError):
    """The ranks of a process group cannot be shown to run fi_patches the same way.

    Raised on every rank that took part, with the same message. ``differences`` maps each
    differing compared field to ``value -> ranks``, ``information`` each differing information
    field (reported, not the cause); ``missing`` lists the ranks (group numbering) that did not
    arrive within the timeout.
    """

    def __init__(
        self,
        message: str,
        differences: Differences | None = None,
        missing: tuple[int, ...] = (),
        information: Differences | None = None,
    ) -> None:
        super().__init__(message)
        self.differences: Differences = differences or {}
        self.information: Differences = information or {}
        self.missing = missing


class TacticDivergenceError(RankMismatchError):
    """The ranks of a tune group were about to profile different candidate lists (the tuning
    divergence detector's, :mod:`fi_patches.ranks`)."""

    def __init__(
        self, message: str, op: str, runner: str, bucket: str, lists: dict[int, Any]
    ) -> None:
        super().__init__(message)
        self.op = op
        self.runner = runner
        self.bucket = bucket
        self.lists = lists


def _ranks_text(view: GroupView, ranks: tuple[int, ...]) -> str:
    names = [view.describe(r).removeprefix("rank ") for r in ranks]
    return f"rank {names[0]} has" if len(names) == 1 else f"ranks {', '.join(names)} have"


def _field_lines(view: GroupView, found: Differences) -> list[str]:
    lines = []
    for name, holders in found.items():
        parts = [
            f"{_ranks_text(view, ranks)} {cut(repr(value), _VALUE_CHARS)}"
            for value, ranks in sorted(holders.items(), key=lambda item: item[1][0])
        ]
        lines.append(f"  {name}: {'; '.join(parts)}")
    return lines


def information_lines(view: GroupView, information: Differences) -> list[str]:
    """The differing information fields, under a line saying they decide no tactic."""
    if not information:
        return []
    return [
        "Also different, for information (these decide no tactic and are not compared):",
        *_field_lines(view, information),
    ]


def mismatch_message(view: GroupView, found: Differences, information: Differences) -> str:
    """Per differing field, which ranks hold which value (the same text on every rank)."""
    return "\n".join(
        [
            f"fi_patches rank guard: the {view.size} ranks of process group {view.name!r} "
            f"disagree on {len(found)} field{'s' if len(found) > 1 else ''}:",
            *_field_lines(view, found),
            *information_lines(view, information),
            "Every rank must load the same pin table content, FlashInfer and CuTe DSL releases, "
            "device and feature states before tuning together.",
        ]
    )


def missing_message(view: GroupView, missing: tuple[int, ...], timeout: float) -> str:
    who = ", ".join(view.describe(r) for r in missing)
    return (
        f"fi_patches rank guard: {who} of the {view.size} ranks of process group {view.name!r} "
        f"did not join within {timeout:g} s (it never called the guard, runs without fi_patches "
        "active, or is stuck); no fingerprints were compared."
    )


def disable_pins(reason: str) -> None:
    """Turn fi_patches' pins off in this process: every patch removed, open ``pinned_tactics()``
    blocks inert, and new blocks and ``fi_patches.auto`` refused until ``fi_patches.enable()``."""
    from fi_patches import startup as _state
    from fi_patches.pinning import stack

    stack.suspend(reason)
    _state.disable()


def _unreachable(exc: ExchangeError) -> RankMismatchError:
    return RankMismatchError(f"fi_patches rank guard: could not compare the ranks: {exc}")


def _act(problem: RankMismatchError, on_mismatch: str, mine: Fingerprint) -> Fingerprint:
    if on_mismatch == "raise":
        raise problem
    if on_mismatch == "disable":
        disable_pins(str(problem).splitlines()[0])
        logger.warning(
            "%s\nfi_patches turned its pins off on this rank (on_mismatch='disable'); every rank "
            "that took part in the guard did the same.",
            problem,
        )
    else:
        logger.warning("%s", problem)
    return mine


def rank_guard(
    group: Any = None, *, on_mismatch: str = "raise", timeout: float = DEFAULT_TIMEOUT
) -> Fingerprint:
    """Compare this rank's fingerprint with every other rank of ``group`` (None: the default
    group) and return the agreed fingerprint.

    A collective: every rank of the group must call it. It works on any backend and never
    waits longer than ``timeout`` seconds for a rank. When the ranks differ or a rank does not
    arrive, ``on_mismatch`` decides: ``"raise"`` raises :class:`RankMismatchError` on every
    rank, naming per differing field which ranks hold which value (or the missing ranks);
    ``"disable"`` turns fi_patches' pins off on every rank that took part and logs why;
    ``"warn"`` logs. In those two modes this rank's own fingerprint is returned.
    """
    return run_guard(group, on_mismatch, timeout, "rank_guard()")


def run_guard(group: Any, on_mismatch: str, timeout: float, call: str) -> Fingerprint:
    """:func:`rank_guard`, with ``call`` naming the call site in the comparison: ranks that
    reach different guard calls (one rank skipped one) are reported instead of matched."""
    if on_mismatch not in MODES:
        raise ValueError(
            f"rank_guard(on_mismatch={on_mismatch!r}): must be one of {', '.join(MODES)}"
        )
    if not timeout > 0:
        raise ValueError(f"rank_guard(timeout={timeout!r}): must be a positive number of seconds")
    try:
        view = group_view(group)
    except ExchangeError as exc:
        return _act(_unreachable(exc), on_mismatch, local_fingerprint())
    mine = local_fingerprint()
    sent = Fingerprint((("guard.call", call), *mine.fields), mine.info)
    try:
        payloads = all_gather(view, NAMESPACE, sent.to_bytes(), timeout)
    except ExchangeTimeout as exc:
        problem = RankMismatchError(
            missing_message(view, exc.missing, timeout), missing=exc.missing
        )
        return _act(problem, on_mismatch, mine)
    except ExchangeError as exc:
        return _act(_unreachable(exc), on_mismatch, mine)
    fingerprints = [Fingerprint.from_bytes(p) for p in payloads]
    found, information = differences(fingerprints), differences(fingerprints, info=True)
    if found:
        message = mismatch_message(view, found, information)
        return _act(RankMismatchError(message, found, information=information), on_mismatch, mine)
    logger.debug("rank guard: the %d ranks of %r agree (%s)", view.size, view.name, mine.digest)
    if information:
        logger.info(
            "%s",
            "\n".join(
                [
                    f"fi_patches rank guard: the {view.size} ranks of process group "
                    f"{view.name!r} agree on everything that decides tactics.",
                    *information_lines(view, information),
                ]
            ),
        )
    return mine


ABSENT = "<absent>"
"""The value shown for a field that one rank has and another has not."""

_digests: weakref.WeakKeyDictionary[PinTable, str] = weakref.WeakKeyDictionary()
_digests_lock = threading.Lock()


def table_digest(table: PinTable) -> str:
    """sha256 of the table's canonical JSON (its file form, keys sorted): equal for equal
    content wherever it was loaded from. Computed once per table object."""
    with _digests_lock:
        cached = _digests.get(table)
    if cached is None:
        text = json.dumps(table.to_mapping(), sort_keys=True, separators=(",", ":"))
        cached = hashlib.sha256(text.encode()).hexdigest()
        with _digests_lock:
            _digests[table] = cached
    return cached


Fields = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Fingerprint:
    """One rank's settings as ``field -> value`` text, in a fixed field order: ``fields`` are
    compared across ranks, ``info`` only reported."""

    fields: Fields
    info: Fields = ()

    def as_dict(self) -> dict[str, str]:
        """Every field, compared and information alike."""
        return dict(self.fields + self.info)

    def __getitem__(self, name: str) -> str:
        return self.as_dict()[name]

    @property
    def digest(self) -> str:
        """sha256 of the compared fields: fingerprints the guard accepts have equal digests."""
        return hashlib.sha256(json.dumps(self.fields, separators=(",", ":")).encode()).hexdigest()

    def to_bytes(self) -> bytes:
        data = {"fields": self.fields, "info": self.info}
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Fingerprint:
        found = json.loads(data)
        if isinstance(found, list):  # an earlier fi_patches: compared fields only
            found = {"fields": found}
        return cls(_pairs(found.get("fields", ())), _pairs(found.get("info", ())))


def _pairs(items: Sequence[Sequence[object]]) -> Fields:
    return tuple((str(name), str(value)) for name, value in items)


def _tables_fields(prefix: str, tables: Sequence[PinTable]) -> tuple[Fields, Fields]:
    """The tables' digests (compared) and sources (information: one content loaded from
    different paths pins the same tactics)."""
    if not tables:
        return ((f"{prefix}.sha256", "none"),), ((f"{prefix}.source", "none"),)
    return (
        ((f"{prefix}.sha256", ", ".join(table_digest(t) for t in tables)),),
        ((f"{prefix}.source", ", ".join(t.source for t in tables)),),
    )


def _default_fields() -> tuple[Fields, Fields]:
    from fi_patches.pins.reading import PinTableError
    from fi_patches.pins.table import ENV, default_pins

    try:
        table = default_pins()
    except PinTableError as exc:
        return (
            (("pins.default.sha256", "invalid"),),
            (("pins.default.source", f"{ENV}: {exc.one_line()}"),),
        )
    return _tables_fields("pins.default", [table] if table else [])


def _cute_dsl_version() -> str:
    """The CuTe DSL's release: it compiles the wide-tile and cute-dsl kernels."""
    from fi_patches.internals.cute_dsl import DISTRIBUTION

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def local_fingerprint() -> Fingerprint:
    """This process's fingerprint, read now (the feature verdicts are the compat layer's
    cached ones). ``FI_PATCHES_*`` variables are information: each one that can change a
    tactic already shows in a compared field (the device, a table's digest, a feature's state,
    ``auto``, ``vllm_route``)."""
    from fi_patches import startup as _state
    from fi_patches._env import settings as fi_patches_settings
    from fi_patches._version import VERSION
    from fi_patches.compat.features import installed_flashinfer
    from fi_patches.compat.target import current_device
    from fi_patches.overview import status
    from fi_patches.pinning import stack

    active, active_info = _tables_fields("pins.active", stack.opened_tables())
    default, default_info = _default_fields()
    fields: Fields = (
        ("fi_patches", VERSION),
        ("flashinfer", installed_flashinfer().label),
        ("cute_dsl", _cute_dsl_version()),
        ("device", current_device().arch or "none"),
        *((f"feature.{r.name}", "enabled" if r.enabled else "disabled") for r in status()),
        ("auto", "on" if _state.pins_requested() else "off"),
        ("vllm_route", _vllm_route()),
        ("pins.state", "suspended" if stack.suspended() else "on"),
        *active,
        *default,
    )
    settings = tuple((f"env.{name}", value) for name, value in fi_patches_settings().items())
    return Fingerprint(fields, active_info + default_info + settings)


def _vllm_route() -> str:
    """Whether vLLM's MXFP8 linears are routed through fi_patches here (read without importing
    the route, which only the vLLM plugin loads)."""
    route = sys.modules.get("fi_patches.vllm.route")
    return "off" if route is None else str(route.state())


Differences = dict[str, dict[str, tuple[int, ...]]]
"""``field -> value -> ranks holding it``, for the fields on which the ranks differ."""


def differences(fingerprints: Sequence[Fingerprint], info: bool = False) -> Differences:
    """The compared fields (``info``: the information fields) on which ``fingerprints`` (one
    per rank, in rank order) differ."""
    tables = [dict(f.info if info else f.fields) for f in fingerprints]
    names: dict[str, None] = {}
    for table in tables:
        names.update(dict.fromkeys(table))
    found: Differences = {}
    for name in names:
        holders: dict[str, list[int]] = {}
        for rank, table in enumerate(tables):
            holders.setdefault(table.get(name, ABSENT), []).append(rank)
        if len(holders) > 1:
            found[name] = {value: tuple(ranks) for value, ranks in holders.items()}
    return found
