"""Values in messages as a pin file spells them: ``true``, ``false``, ``null``, ``"text"``,
``[128, 8, 1, 1]``, never Python's ``True``, ``None`` or ``'text'``. Values come from untrusted
files, so the text is bounded in length and depth, and never formats an integer past Python's
int-to-str digit limit; it never raises."""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping

MAX_DEPTH = 3
MAX_ITEMS = 6
MAX_STRING = 60
_MAX_INT_BITS = 192  # ~58 digits: printing it could hit the digit limit


def value_text(value: object) -> str:
    """``value`` as the file writes it (JSON's spelling, which TOML shares for these values)."""
    try:
        return _text(value, 0)
    except Exception:  # anything a parser's output should not hold
        return f"<{type(value).__name__}>"


def _text(value: object, depth: int) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            return f"<{'-' if value < 0 else ''}integer of {value.bit_length()} bits>"
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        cut = value if len(value) <= MAX_STRING else value[: MAX_STRING - 3] + "..."
        return json.dumps(cut, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            return "[...]"
        items = [_text(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append("...")
        return f"[{', '.join(items)}]"
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            return "{...}"
        pairs = [
            f"{_text(str(k), depth + 1)}: {_text(v, depth + 1)}"
            for k, v in list(value.items())[:MAX_ITEMS]
        ]
        if len(value) > MAX_ITEMS:
            pairs.append("...")
        return f"{{{', '.join(pairs)}}}"
    if isinstance(value, (datetime.date, datetime.time)):  # TOML's dates and times
        return value.isoformat()
    text = repr(value)  # the readers' stand-ins, such as an integer too long to convert
    return text if len(text) <= MAX_STRING else f"<{type(value).__name__}>"
