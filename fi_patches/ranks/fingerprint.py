"""What each rank contributes to the rank guard: the fields that decide which tactics its tuner
is offered (versions, device, feature states, the pin tables' content), compared across ranks,
and the fields reported as information only (the tables' sources, the ``FI_PATCHES_*``
settings), which cannot change a tactic. Two ranks with equal compared fields offer their tuners
the same candidate lists."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fi_patches.pins.table import PinTable

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
    from fi_patches.pins.default import ENV, default_pins
    from fi_patches.pins.errors import PinTableError

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
    from fi_patches import _state
    from fi_patches._version import VERSION
    from fi_patches.compat.evaluate import installed_flashinfer
    from fi_patches.compat.target import current_device
    from fi_patches.overview import status
    from fi_patches.pinning import stack
    from fi_patches.ranks.settings import fi_patches_settings

    active, active_info = _tables_fields("pins.active", stack.active_tables())
    default, default_info = _default_fields()
    fields: Fields = (
        ("fi_patches", VERSION),
        ("flashinfer", installed_flashinfer().label),
        ("cute_dsl", _cute_dsl_version()),
        ("device", current_device().arch or "none"),
        *((f"feature.{r.name}", "enabled" if r.enabled else "disabled") for r in status()),
        ("auto", "on" if _state.requested() else "off"),
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
