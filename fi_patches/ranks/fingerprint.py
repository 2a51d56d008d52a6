"""What each rank contributes to the rank guard: the versions, device, feature states, pin
tables and ``FI_PATCHES_*`` settings that decide which tactics its tuner is offered. Two ranks
with equal fingerprints offer their tuners the same candidate lists."""

from __future__ import annotations

import hashlib
import json
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


@dataclass(frozen=True)
class Fingerprint:
    """One rank's settings as ``field -> value`` text, in a fixed field order."""

    fields: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict[str, str]:
        return dict(self.fields)

    def __getitem__(self, name: str) -> str:
        return self.as_dict()[name]

    @property
    def digest(self) -> str:
        """sha256 of the fields: equal fingerprints have equal digests."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def to_bytes(self) -> bytes:
        return json.dumps(self.fields, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Fingerprint:
        return cls(tuple((str(name), str(value)) for name, value in json.loads(data)))


def _tables_fields(prefix: str, tables: Sequence[PinTable]) -> list[tuple[str, str]]:
    if not tables:
        return [(f"{prefix}.sha256", "none"), (f"{prefix}.source", "none")]
    return [
        (f"{prefix}.sha256", ", ".join(table_digest(t) for t in tables)),
        (f"{prefix}.source", ", ".join(t.source for t in tables)),
    ]


def _default_fields() -> list[tuple[str, str]]:
    from fi_patches.pins.default import ENV, default_pins
    from fi_patches.pins.errors import PinTableError

    try:
        table = default_pins()
    except PinTableError as exc:
        return [
            ("pins.default.sha256", "invalid"),
            ("pins.default.source", f"{ENV}: {exc.one_line()}"),
        ]
    return _tables_fields("pins.default", [table] if table else [])


def local_fingerprint() -> Fingerprint:
    """This process's fingerprint, read now (the feature verdicts are the compat layer's
    cached ones)."""
    import fi_patches
    from fi_patches import activation
    from fi_patches.compat.device import current_device
    from fi_patches.compat.installed import installed_flashinfer
    from fi_patches.overview import status
    from fi_patches.pinning import stack
    from fi_patches.ranks.settings import fi_patches_settings

    fields: list[tuple[str, str]] = [
        ("fi_patches", fi_patches.__version__),
        ("flashinfer", installed_flashinfer().label),
        ("device", current_device().arch or "none"),
    ]
    fields += [(f"feature.{r.name}", "enabled" if r.enabled else "disabled") for r in status()]
    fields.append(("auto", "on" if activation.requested() else "off"))
    fields.append(("pins.state", "suspended" if stack.suspended() else "on"))
    fields += _tables_fields("pins.active", stack.active_tables())
    fields += _default_fields()
    fields += [(f"env.{name}", value) for name, value in fi_patches_settings().items()]
    return Fingerprint(tuple(fields))


Differences = dict[str, dict[str, tuple[int, ...]]]
"""``field -> value -> ranks holding it``, for the fields on which the ranks differ."""


def differences(fingerprints: Sequence[Fingerprint]) -> Differences:
    """The fields on which ``fingerprints`` (one per rank, in rank order) differ."""
    tables = [f.as_dict() for f in fingerprints]
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
