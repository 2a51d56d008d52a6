"""Which custom ops and runner classes the installed FlashInfer still has, read from its sources,
for checking ``[[pin]]`` entries across an upgrade without running any op.

FlashInfer builds most runner classes inside factory functions, so a class exists as an object
only after its op first runs; its definition is in the source from the start. A runner class is
known when a live ``TunableRunner`` subclass has its name or a FlashInfer source file defines
it; an op is known when a source file that tunes ops spells its name, or when the name matches
one FlashInfer builds at run time (an f-string or a helper's return value reaching
``choose_one``: :mod:`fi_patches.internals.op_names`). Read once per process; the run-time
names are read only when an op is not spelled as a literal.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from fi_patches._logging import get_logger
from fi_patches.internals import op_names

logger = get_logger(__name__)

_CLASS = re.compile(rb"^([ \t]*)class[ \t]+(\w+)[ \t]*[(:]", re.M)
_LITERAL = re.compile(rb"""["']([\w:.\-]{1,200})["']""")
_TUNING = (b"TunableRunner", b"choose_one")
_TUNES = b"choose_one"
_lock = threading.Lock()


@dataclass(frozen=True)
class Defined:
    """Where FlashInfer's sources define a class: the file (relative to the package's parent)
    and whether the definition is nested in a function (a factory builds the class per call)."""

    file: str
    nested: bool


class Catalog:
    """Class names and string literals of FlashInfer's source files that tune ops."""

    def __init__(
        self,
        classes: frozenset[str],
        literals: frozenset[str],
        files: int,
        defined: dict[str, Defined] | None = None,
        tuning: tuple[Path, ...] = (),
    ) -> None:
        self.classes = classes
        self.literals = literals
        self.files = files
        self.defined = defined or {}
        """Where each class is defined (its first definition)."""
        self._tuning = tuning
        self._patterns: tuple[re.Pattern[str], ...] | None = None
        self._patterns_lock = threading.Lock()

    def runner_known(self, name: str) -> bool:
        if name in self.classes:
            return True
        from fi_patches.internals import tuner as fi_tuner
        from fi_patches.patching.subclasses import all_subclasses

        return any(cls.__name__ == name for cls in all_subclasses(fi_tuner.tunable_runner()))

    def op_known(self, op: str) -> bool:
        """Whether FlashInfer tunes an op called ``op``: a literal of its sources, or a name
        matching one it builds at run time."""
        if op in self.literals:
            return True
        return any(p.fullmatch(op) for p in self.built_names())

    def built_names(self) -> tuple[re.Pattern[str], ...]:
        """The patterns of the op names FlashInfer builds at run time (read on first use)."""
        with self._patterns_lock:
            if self._patterns is None:
                sources = []
                for path in self._tuning:
                    try:
                        sources.append(path.read_bytes())
                    except OSError:
                        continue
                found = op_names.read(sources)
                self._patterns = tuple(op_names.compile_pattern(p) for p in sorted(found))
                logger.debug("catalog: %d run-time op name patterns", len(found))
            return self._patterns


@functools.lru_cache(maxsize=4)
def _scan(root: str) -> Catalog:
    classes: set[str] = set()
    literals: set[str] = set()
    defined: dict[str, Defined] = {}
    tuning: list[Path] = []
    files = 0
    base = Path(root).parent
    for path in sorted(Path(root).rglob("*.py")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not any(marker in data for marker in _TUNING):
            continue
        files += 1
        if _TUNES in data:
            tuning.append(path)
        where = str(path.relative_to(base))
        for m in _CLASS.finditer(data):
            name = m.group(2).decode()
            classes.add(name)
            defined.setdefault(name, Defined(where, bool(m.group(1))))
        literals.update(m.group(1).decode() for m in _LITERAL.finditer(data))
    logger.debug("catalog of %s: %d files, %d classes", root, files, len(classes))
    return Catalog(frozenset(classes), frozenset(literals), files, defined, tuple(tuning))


def catalog_of(root: str | Path) -> Catalog:
    """The catalog of the package whose sources are under ``root`` (read once per root)."""
    with _lock:
        return _scan(str(root))


def catalog() -> Catalog | None:
    """The installed FlashInfer's catalog, or None where its sources cannot be found."""
    import importlib.util

    from fi_patches.internals.flashinfer import FLASHINFER

    spec = importlib.util.find_spec(FLASHINFER.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return catalog_of(next(iter(spec.submodule_search_locations)))
