"""Typed reading of one table or entry, collecting a :class:`PinProblem` per bad field so a
table reports everything wrong with it at once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fi_patches.pins.errors import PinProblem

_MISSING: Any = object()


class FieldReader:
    """Reads fields of ``mapping`` (the entry at ``where`` in ``source``) into Python values."""

    def __init__(
        self, source: str, where: str, mapping: object, problems: list[PinProblem]
    ) -> None:
        self.source = source
        self.where = where
        self.problems = problems
        if isinstance(mapping, Mapping):
            self.mapping: Mapping[str, Any] = mapping
        else:
            self.mapping = {}
            self.problems.append(
                PinProblem(
                    source, where, None, None, f"must be a table, not {type(mapping).__name__}"
                )
            )

    def problem(self, field: str | None, value: object, message: str) -> None:
        self.problems.append(PinProblem(self.source, self.where, field, value, message))

    def _get(self, name: str, default: Any) -> Any:
        if name in self.mapping:
            return self.mapping[name]
        if default is _MISSING:
            self.problem(name, None, "is required")
        return default

    def integer(
        self, name: str, lo: int | None = None, hi: int | None = None, default: Any = _MISSING
    ) -> int | None:
        value = self._get(name, default)
        if value is None or (value is default and default is not _MISSING):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(name, value, f"must be an integer, not {type(value).__name__}")
            return None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = (
                f"between {lo} and {hi}"
                if lo is not None and hi is not None
                else (f"at least {lo}" if lo is not None else f"at most {hi}")
            )
            self.problem(name, value, f"must be {bounds}")
            return None
        return value

    def string(self, name: str, default: Any = _MISSING) -> str | None:
        value = self._get(name, default)
        if value is None or (value is default and default is not _MISSING):
            return value
        if not isinstance(value, str):
            self.problem(name, value, f"must be a string, not {type(value).__name__}")
            return None
        return value

    def int_tuple(self, name: str, length: int) -> tuple[int, ...] | None:
        value = self._get(name, _MISSING)
        if value is None:
            return None
        if not isinstance(value, (list, tuple)) or len(value) != length:
            self.problem(name, value, f"must be a list of {length} integers")
            return None
        if any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            self.problem(name, value, f"must be a list of {length} integers")
            return None
        return tuple(value)

    def raw(self, name: str) -> Any:
        return self._get(name, _MISSING)

    def reject_unknown(self, known: Iterable[str]) -> None:
        allowed = set(known)
        for name in self.mapping:
            if name not in allowed:
                self.problem(
                    name,
                    self.mapping[name],
                    f"is not a known field (known: {', '.join(sorted(allowed))})",
                )
