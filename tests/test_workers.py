"""The worker-thread helper the thread tests use: a worker that raises, dies before a barrier
or never finishes fails the test, in bounded time."""

from __future__ import annotations

import threading
import time

import pytest

from tests.workers import barrier, workers


def _boom() -> None:
    raise ZeroDivisionError("worker bug")


def test_a_worker_that_raises_fails_the_test_naming_the_error() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"worker 0 raised ZeroDivisionError"):
        with workers() as pool:
            pool.start(_boom)


def test_a_worker_dead_before_the_barrier_releases_the_others_at_once() -> None:
    start = barrier(2, timeout=30)
    began = time.monotonic()
    with pytest.raises(threading.BrokenBarrierError), workers(start) as pool:
        pool.start(_boom)
        start.wait()  # aborted by the dying worker, not left to its 30 s timeout
    assert time.monotonic() - began < 10
    assert isinstance(pool.errors[0][1], ZeroDivisionError)


def test_a_worker_that_never_finishes_fails_after_the_bound() -> None:
    stop = threading.Event()
    began = time.monotonic()
    try:
        with pytest.raises(pytest.fail.Exception, match="still running after"):
            with workers(timeout=0.5) as pool:
                pool.start(stop.wait)
    finally:
        stop.set()
    assert time.monotonic() - began < 10
