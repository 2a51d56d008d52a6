"""Which custom ops and runner classes the installed FlashInfer still has, read from its sources,
for checking ``[[pin]]`` entries across an upgrade without running any op.

FlashInfer builds most runner classes inside factory functions, so a class exists as an object
only after its op first runs; its definition is in the source from the start. A runner class is
known when a live ``TunableRunner`` subclass has its name or a FlashInfer source file defines
it; an op is known when a source file that tunes ops spells its name. Read once per process.
"""

from __future__ import annotations

import functools
import re
import threading
from pathlib import Path

from fi_patches._logging import get_logger

logger = get_logger(__name__)

_CLASS = re.compile(rb"^[ \t]*class[ \t]+(\w+)[ \t]*[(:]", re.M)
_LITERAL = re.compile(rb"""["']([\w:.\-]{1,200})["']""")
_TUNING = (b"TunableRunner", b"choose_one")
_lock = threading.Lock()


class Catalog:
    """Class names and string literals of FlashInfer's source files that tune ops."""

    def __init__(self, classes: frozenset[str], literals: frozenset[str], files: int) -> None:
        self.classes = classes
        self.literals = literals
        self.files = files

    def runner_known(self, name: str) -> bool:
        if name in self.classes:
            return True
        from fi_patches.internals import tuner as fi_tuner
        from fi_patches.patching.subclasses import all_subclasses

        return any(cls.__name__ == name for cls in all_subclasses(fi_tuner.tunable_runner()))

    def op_known(self, op: str) -> bool:
        return op in self.literals


@functools.lru_cache(maxsize=4)
def _scan(root: str) -> Catalog:
    classes: set[str] = set()
    literals: set[str] = set()
    files = 0
    for path in Path(root).rglob("*.py"):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not any(marker in data for marker in _TUNING):
            continue
        files += 1
        classes.update(m.group(1).decode() for m in _CLASS.finditer(data))
        literals.update(m.group(1).decode() for m in _LITERAL.finditer(data))
    logger.debug("catalog of %s: %d files, %d classes", root, files, len(classes))
    return Catalog(frozenset(classes), frozenset(literals), files)


def catalog() -> Catalog | None:
    """The installed FlashInfer's catalog, or None where its sources cannot be found."""
    import importlib.util

    from fi_patches.internals.flashinfer import FLASHINFER

    spec = importlib.util.find_spec(FLASHINFER.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = str(next(iter(spec.submodule_search_locations)))
    with _lock:
        return _scan(root)
