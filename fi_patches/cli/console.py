"""Plain-text tables for the CLI's reports.

A progress display on stderr for long CLI commands: tqdm when it is installed, else a plain
counter that rewrites one line.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TextIO


def render(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` under ``headers`` in aligned columns (the last column is not padded)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


class PlainCounter:
    """``tune: 120/840 samples (rows 5..8, low_latency 2112x7168)``, rewritten at most five
    times a second and always at the end."""

    def __init__(self, stream: TextIO, desc: str) -> None:
        self.stream, self.desc = stream, desc
        self.done = 0
        self.shown = 0.0
        self.printed = False

    def __call__(self, advance: int, total: int, label: str) -> None:
        self.done += advance
        now = time.monotonic()
        if self.done < total and now - self.shown < 0.2:
            return
        self.shown = now
        self.stream.write(f"\r{self.desc}: {self.done}/{total} samples ({label})\x1b[K")
        self.stream.flush()
        self.printed = True

    def close(self) -> None:
        if self.printed:
            self.stream.write("\n")
            self.stream.flush()


class TqdmBar:
    """tqdm's bar, made on the first update (when the total is first known)."""

    def __init__(self, tqdm: Any, stream: TextIO, desc: str) -> None:
        self.tqdm, self.stream, self.desc = tqdm, stream, desc
        self.bar: Any = None

    def __call__(self, advance: int, total: int, label: str) -> None:
        if self.bar is None:
            self.bar = self.tqdm(total=total, file=self.stream, desc=self.desc, unit="sample")
        if self.bar.total != total:
            self.bar.total = total
            self.bar.refresh()
        self.bar.set_postfix_str(label, refresh=False)
        self.bar.update(advance)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def progress(stream: TextIO, desc: str, use_tqdm: bool | None = None) -> PlainCounter | TqdmBar:
    """A progress callback ``(advance, total, label)`` with ``close()``: tqdm's bar when
    ``use_tqdm`` is not False and tqdm imports, else :class:`PlainCounter`."""
    if use_tqdm is not False:
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            return TqdmBar(tqdm, stream, desc)
    return PlainCounter(stream, desc)
