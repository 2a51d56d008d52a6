"""Write a pin table's mapping as TOML (the standard library reads TOML but does not write it;
pin tables hold strings, numbers, booleans, nested lists and, in a ``[[pin]]`` tactic, inline
tables). TOML has no null: a table whose tactic holds one is written as JSON instead."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def _basic(text: str) -> str:
    """``text`` as a TOML basic string: JSON's escapes, no surrogate pairs, and DEL escaped too
    (JSON leaves it raw; TOML forbids it)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        if "\n" in value:  # a multi-line basic string: each line as a basic string's inside
            lines = [_basic(line)[1:-1] for line in value.split("\n")]
            return '"""\n' + "\n".join(lines) + '"""'
        return _basic(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{json.dumps(str(k))} = {_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    if value is None:
        raise TypeError("TOML has no null; write this table as .json")
    raise TypeError(f"cannot write {type(value).__name__} {value!r} to a pin table")


def dumps(data: Mapping[str, Any]) -> str:
    """``data`` (a ``PinTable.to_mapping()``) as TOML: ``[meta]`` then arrays of tables."""
    lines: list[str] = []
    meta = data.get("meta", {})
    lines.append("[meta]")
    lines.extend(f"{key} = {_value(value)}" for key, value in meta.items())
    for section, entries in data.items():
        if section == "meta":
            continue
        for entry in entries:
            lines.append("")
            lines.append(f"[[{section}]]")
            lines.extend(f"{key} = {_value(value)}" for key, value in entry.items())
    return "\n".join(lines) + "\n"
