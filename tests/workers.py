"""Worker threads for tests: every exception a worker raises fails the test, and every join and
barrier is bounded, so a dead or stuck worker fails the test in bounded time instead of passing
unseen or hanging the run."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

BOUND_S = 60.0
"""How long a worker may run, or anyone wait at a barrier, before the test fails (generous: the
machine may be shared; a healthy test finishes in well under a second)."""


def barrier(parties: int, timeout: float = BOUND_S) -> threading.Barrier:
    """A barrier whose waits give up (``BrokenBarrierError``) after ``timeout`` seconds."""
    return threading.Barrier(parties, timeout=timeout)


class Workers:
    """Starts worker threads, records what each raises, and on :meth:`join` fails the test
    naming every worker that raised or is still running after the bound. A worker that raises
    aborts the ``barriers`` given, so the others (and the main thread) stop waiting for it."""

    def __init__(
        self, *barriers: threading.Barrier, timeout: float = BOUND_S, name: str = "worker"
    ) -> None:
        self.barriers = barriers
        self.timeout = timeout
        self.name = name
        self.threads: list[threading.Thread] = []
        self.errors: list[tuple[str, BaseException, str]] = []
        self._lock = threading.Lock()

    def start(self, target: Callable[..., Any], *args: Any) -> threading.Thread:
        """Run ``target(*args)`` in a new daemon thread (a stuck one cannot hold the run open)."""
        label = f"{self.name} {len(self.threads)}"

        def run() -> None:
            try:
                target(*args)
            except BaseException as exc:
                with self._lock:
                    self.errors.append((label, exc, traceback.format_exc()))
                for b in self.barriers:
                    b.abort()

        thread = threading.Thread(target=run, name=label, daemon=True)
        self.threads.append(thread)
        thread.start()
        return thread

    def join(self) -> None:
        """Wait for every worker, at most ``timeout`` seconds in all, then fail the test if any
        raised or did not finish."""
        deadline = time.monotonic() + self.timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        problems = [f"{label} raised {exc!r}\n{trace}" for label, exc, trace in self.errors]
        if stuck:
            for b in self.barriers:
                b.abort()
            problems.append(f"still running after {self.timeout:.0f} s: {', '.join(stuck)}")
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


@contextmanager
def workers(
    *barriers: threading.Barrier, timeout: float = BOUND_S, name: str = "worker"
) -> Iterator[Workers]:
    """:class:`Workers` that are joined (and checked) when the block ends, also when the main
    thread's part raised (its exception wins; the barriers are aborted so the workers end)."""
    pool = Workers(*barriers, timeout=timeout, name=name)
    try:
        yield pool
    except BaseException:
        for b in barriers:
            b.abort()
        deadline = time.monotonic() + pool.timeout
        for thread in pool.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        raise
    pool.join()
