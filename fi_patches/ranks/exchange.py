"""All-gather of one small payload per rank through the process group's key-value store, with
a deadline that names the ranks that did not arrive.

Why the store and not a collective: ``all_gather_object`` has no deadline on gloo, and a
collective that one rank never joins also leaves the group's collective sequence out of step.
The store (a TCPStore or FileStore every process group is created with, whatever its backend)
has ``wait(keys, timeout)``, so a missing rank costs at most ``timeout`` and is known by
number. The exchange issues no collective, so it works beside NCCL, gloo or any backend.

Every rank posts ``<prefix>/<rank>`` and waits for all ranks' keys. The outcome is agreed through
one ``compare_set`` on ``<prefix>/verdict``: the first rank to decide writes ``ok`` (all keys
present) or the ranks it found missing, and every rank, however late, reads that same verdict.
So either every arriving rank gets every payload, or every arriving rank fails with the same
missing ranks. The last rank to read deletes the keys.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fi_patches.internals import tuner as fi_tuner

ROOT = "fi_patches"
_OK = b"ok"
_MISSING = "missing:"


class ExchangeTimeout(Exception):
    """Some ranks of the group did not post within the deadline."""

    def __init__(self, missing: tuple[int, ...], timeout: float) -> None:
        self.missing = missing
        self.timeout = timeout
        super().__init__(f"ranks {list(missing)} did not arrive within {timeout:g} s")


class ExchangeError(Exception):
    """The group's store could not be used (a closed connection, an unsupported store)."""


@dataclass(frozen=True)
class GroupView:
    """This process's place in a process group, and the group's store."""

    store: Any
    rank: int
    size: int
    global_ranks: tuple[int, ...]
    name: str

    def describe(self, rank: int) -> str:
        """``rank 2``, or ``rank 2 (global 6)`` when group and global numbering differ."""
        global_rank = self.global_ranks[rank] if rank < len(self.global_ranks) else rank
        return f"rank {rank}" if global_rank == rank else f"rank {rank} (global {global_rank})"


@functools.cache
def _store_unavailable() -> str | None:
    return fi_tuner.first_failure(fi_tuner.STORE_PROBES)


def group_view(group: Any = None) -> GroupView:
    """The view of ``group`` (None: the default group); ValueError when torch.distributed is
    not initialized or this process is not a member, ExchangeError when this torch offers no
    way to reach the group's store."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            "torch.distributed is not initialized: call init_process_group() before the guard"
        )
    pg = group if group is not None else dist.group.WORLD
    rank = dist.get_rank(pg)
    if rank < 0:
        raise ValueError("this process is not a member of the process group")
    reason = _store_unavailable()
    if reason is not None:
        raise ExchangeError(
            f"torch.distributed does not give fi_patches the group's store: {reason}"
        )
    ranks = tuple(dist.get_process_group_ranks(pg))
    if pg is dist.group.WORLD:
        name = "default"
    else:
        name = str(getattr(pg, "group_name", "") or ",".join(map(str, ranks)))
    return GroupView(fi_tuner.group_store(pg), rank, dist.get_world_size(pg), ranks, name)


_counters: dict[tuple[str, str, int], int] = {}
_counters_lock = threading.Lock()


def _next_prefix(view: GroupView, namespace: str) -> str:
    """A key prefix unique to this call: every rank numbers its calls per group and namespace
    in the same order, as with any collective."""
    key = (namespace, view.name, view.rank)
    with _counters_lock:
        sequence = _counters.get(key, 0)
        _counters[key] = sequence + 1
    return f"{ROOT}/{namespace}/{sequence}/"


def _missing(store: Any, keys: list[str]) -> tuple[int, ...]:
    return tuple(rank for rank, key in enumerate(keys) if not store.check([key]))


def all_gather(view: GroupView, namespace: str, payload: bytes, timeout: float) -> list[bytes]:
    """Every rank's ``payload``, in group-rank order; raises :class:`ExchangeTimeout` (the same
    missing ranks on every rank that arrived) or :class:`ExchangeError`."""
    if view.size == 1:
        return [payload]
    store = view.store
    prefix = _next_prefix(view, namespace)
    keys = [f"{prefix}{rank}" for rank in range(view.size)]
    try:
        store.set(keys[view.rank], payload)
        try:
            store.wait(keys, timedelta(seconds=timeout))
            proposal = _OK
        except Exception:  # the deadline (DistStoreError), or a broken store: checked next
            missing = _missing(store, keys)
            proposal = (_MISSING + ",".join(map(str, missing))).encode() if missing else _OK
        verdict = bytes(store.compare_set(f"{prefix}verdict", "", proposal))
        if verdict != _OK:
            text = verdict.decode()[len(_MISSING) :]
            raise ExchangeTimeout(tuple(int(r) for r in text.split(",") if r), timeout)
        values = [bytes(v) for v in store.multi_get(keys)]
        if store.add(f"{prefix}done", 1) == view.size:
            for key in (*keys, f"{prefix}verdict", f"{prefix}done"):
                store.delete_key(key)
    except ExchangeTimeout:
        raise
    except Exception as exc:
        raise ExchangeError(
            f"the process group's store failed: {type(exc).__name__}: {exc}"
        ) from exc
    return values
