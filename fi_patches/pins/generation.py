"""The generation of the pin state: one counter that changes whenever the tables that could
serve a call may have (a block left, process tables added or removed, pins suspended or resumed,
a table registered, ``fi_patches.refresh()``). Hot paths cache on it, with the context's scope,
at the cost of one read."""

from __future__ import annotations

import threading

GENERATION = [0]
"""The counter, in a list so that readers bind it once (``GENERATION[0]`` per read)."""

_lock = threading.Lock()


def bump() -> None:
    """Mark every cache keyed on the generation stale."""
    with _lock:
        GENERATION[0] += 1
