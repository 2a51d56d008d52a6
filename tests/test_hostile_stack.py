"""The context-local pin stack under any order of entering and leaving blocks: across the
driving task, asyncio tasks it starts (which inherit its open blocks), threads (which start
with none), blocks left from another context (a generator closed elsewhere, a task finalized
by the garbage collector) and tasks cancelled or abandoned. After every step each live actor
sees exactly the open blocks it holds or inherited, innermost first, through both
``opened_tables()`` and the hot path's index; once all are closed, no pins remain anywhere.
The end-to-end tests at the bottom do the same through ``pinned_tactics`` and FlashInfer's real
low-latency runner."""

from __future__ import annotations

import asyncio
import gc
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fi_patches
from fi_patches.pinning import stack
from fi_patches.pinning.index import PinIndex
from fi_patches.pins import PinTable
from fi_patches.pins.table import covering
from tests import lowlat
from tests.conftest import costly_examples
from tests.workers import barrier, workers

# Nothing here depends on the installed FlashInfer release: the compat matrix runs it once, in
# the main run, not in every cell (see pyproject.toml).
pytestmark = pytest.mark.release_independent

N, K = lowlat.SHAPE
META = {"device": "sm_103", "flashinfer": ">=0.7.0"}
CPU_BOUND_S = 2.0
"""A correctness bound on one example's CPU time in the driving thread, not a speed target
(CPU rather than wall time: a loaded shared host can stall a process for seconds)."""
WALL_BOUND_S = 30.0
"""Wall time after which a step counts as hung."""

TABLES = [
    PinTable.from_mapping(
        {
            "meta": META,
            "low_latency": [
                {"n": N, "k": K, "min_rows": 1, "max_rows": 8, "tactic": [128, i + 1, 1, 1]}
            ],
        },
        source=f"t{i}",
    )
    for i in range(6)
]


def find(index: PinIndex, section: str, n: int, k: int, rows: int) -> Any:
    """The highest-priority entry of ``section`` in ``index`` covering ``rows`` rows of weight
    ``(n, k)``, read from the index the hot path reads."""
    shapes = index.sections.get(section)
    group = shapes.by_nk.get((n, k)) if shapes is not None else None
    return covering(group, rows) if group else None


def observe() -> tuple[tuple[PinTable, ...], Any]:
    """What this context sees: the active tables and the hot path's pin for (N, K, 8)."""
    index = stack.current_index()
    entry = find(index, "low_latency", N, K, 8) if index is not None else None
    return stack.opened_tables(), entry


@dataclass(eq=False)
class Actor:
    """A thread, a task or the driving task, running the callables it is sent."""

    kind: str
    run: Callable[[Callable[[], Any]], Any]
    own: list[stack.Block] = field(default_factory=list)
    inherited: tuple[stack.Block, ...] = ()
    stop: Callable[[], None] = lambda: None

    def expected(self) -> tuple[PinTable, ...]:
        blocks = [*reversed(self.own), *(b for b in self.inherited if b.is_open)]
        return tuple(b.table for b in blocks)


def _outcome(job: Callable[[], Any]) -> tuple[bool, Any]:
    """What a job returned, or what it raised: an actor hands either back to the driver."""
    try:
        return True, job()
    except Exception as exc:
        return False, exc


def _result(outcome: tuple[bool, Any]) -> Any:
    """The job's value, or its exception raised again in the driver (so the test fails)."""
    ok, value = outcome
    if not ok:
        raise value
    return value


def thread_actor() -> Actor:
    inbox: queue.Queue[Any] = queue.Queue()
    outbox: queue.Queue[Any] = queue.Queue()

    def serve() -> None:
        while (job := inbox.get()) is not None:
            outbox.put(_outcome(job))

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()

    def run(job: Callable[[], Any]) -> Any:
        inbox.put(job)
        return _result(outbox.get(timeout=WALL_BOUND_S))

    def stop() -> None:
        inbox.put(None)
        worker.join(WALL_BOUND_S)
        assert not worker.is_alive(), f"a thread actor did not stop in {WALL_BOUND_S} s"

    return Actor("thread", run, stop=stop)


class TaskActor:
    """An asyncio task serving callables; it leaves the blocks it holds when it ends (cancelled,
    or closed by the garbage collector when abandoned)."""

    def __init__(self, held: list[stack.Block]) -> None:
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self.serve(held))

    async def serve(self, held: list[stack.Block]) -> None:
        try:
            while True:
                job = await self.inbox.get()
                self.outbox.put_nowait(_outcome(job))
        finally:
            for block in list(held):
                stack.pop(block)


async def check(actors: list[Actor], tasks: dict[Actor, TaskActor]) -> None:
    for actor in actors:
        if actor.kind == "task":
            runner = tasks[actor]
            runner.inbox.put_nowait(observe)
            seen = _result(await asyncio.wait_for(runner.outbox.get(), WALL_BOUND_S))
        else:
            seen = actor.run(observe)
        expected = actor.expected()
        assert seen[0] == expected, (actor.kind, seen[0], expected)
        assert seen[1] == (expected[0].entries("low_latency")[0] if expected else None)


async def scenario(data: st.DataObject) -> None:
    driver = Actor("driver", lambda job: job())
    actors = [driver]
    tasks: dict[Actor, TaskActor] = {}

    async def run(actor: Actor, job: Callable[[], Any]) -> Any:
        if actor.kind != "task":
            return actor.run(job)
        tasks[actor].inbox.put_nowait(job)
        return _result(await asyncio.wait_for(tasks[actor].outbox.get(), WALL_BOUND_S))

    try:
        for _ in range(data.draw(st.integers(1, 12), label="steps")):
            holders = [a for a in actors if a.own]
            moves = ["enter", "thread", "task"] + (["exit", "exit_elsewhere"] if holders else [])
            if any(a.kind == "task" for a in actors):
                moves += ["cancel", "abandon"]
            move = data.draw(st.sampled_from(moves), label="move")
            if move == "thread" and sum(a.kind == "thread" for a in actors) < 2:
                actors.append(thread_actor())
            elif move == "task" and len(tasks) < 3:
                inherited = tuple(reversed(driver.own))
                actor = Actor("task", driver.run, inherited=inherited)
                tasks[actor] = TaskActor(actor.own)
                actors.append(actor)
            elif move == "enter":
                actor = data.draw(st.sampled_from(actors), label="actor")
                table = data.draw(st.sampled_from(TABLES), label="table")
                actor.own.append(await run(actor, lambda t=table: stack.push(t)))
            elif move in ("exit", "exit_elsewhere"):
                owner = data.draw(st.sampled_from(holders), label="owner")
                block = data.draw(st.sampled_from(owner.own), label="block")
                leaver = (
                    data.draw(st.sampled_from(actors), label="leaver")
                    if move == "exit_elsewhere"
                    else owner
                )
                await run(leaver, lambda b=block: stack.pop(b))
                owner.own.remove(block)
            elif move in ("cancel", "abandon"):
                actor = data.draw(st.sampled_from(list(tasks)), label="task")
                runner = tasks.pop(actor)
                actors.remove(actor)
                if move == "cancel":
                    runner.task.cancel()
                    await asyncio.gather(runner.task, return_exceptions=True)
                else:  # drop every reference: the collector closes the pending coroutine
                    del runner
                    gc.collect()
                assert all(not b.is_open for b in actor.own)
            await check(actors, tasks)
        # Leave every block still open, each from its own actor, then nothing is pinned.
        for actor in actors:
            while actor.own:
                last = actor.own.pop()
                await run(actor, lambda b=last: stack.pop(b))
        await check(actors, tasks)
        assert all(actor.expected() == () for actor in actors)
    finally:
        for runner in tasks.values():
            runner.task.cancel()
        await asyncio.gather(*(r.task for r in tasks.values()), return_exceptions=True)
        for actor in actors:
            actor.stop()


def quiet_pending_tasks(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    """Silence the loop's "Task was destroyed but it is pending!" notices (the tests abandon
    tasks on purpose) and collect every other error it reports, for the test to assert none."""
    unexpected: list[dict[str, Any]] = []

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not str(context.get("message", "")).startswith("Task was destroyed but it is pending"):
            unexpected.append(context)

    loop.set_exception_handler(handle)
    return unexpected


@costly_examples()
@given(st.data())
def test_any_interleaving_leaves_exactly_the_open_blocks_active(data):
    started, cpu = time.monotonic(), time.thread_time()
    gc.freeze()  # the collector then scans only this example's objects (abandoned tasks)
    loop = asyncio.new_event_loop()
    unexpected = quiet_pending_tasks(loop)
    try:
        loop.run_until_complete(scenario(data))
    finally:
        loop.close()
        gc.unfreeze()
    assert unexpected == []
    assert stack.opened_tables() == () and stack.current_index() is None
    assert time.thread_time() - cpu < CPU_BOUND_S
    assert time.monotonic() - started < WALL_BOUND_S


# --- end to end: pinned_tactics and FlashInfer's real low-latency runner ----------------------


def table(tactic: tuple[int, ...], source: str) -> PinTable:
    return PinTable.from_mapping(
        {
            "meta": META,
            "low_latency": [{"n": N, "k": K, "min_rows": 5, "max_rows": 8, "tactic": list(tactic)}],
        },
        source=source,
    )


def block(pins: PinTable):
    with fi_patches.pinned_tactics(pins):
        yield


def test_generators_closed_in_the_order_opened_leave_no_pins(pinning):
    runner = lowlat.runner()
    stock = lowlat.stock(N, K, 8)
    first, second = table(stock[1], "a"), table(stock[2], "b")
    g1, g2 = block(first), block(second)
    next(g1)
    next(g2)
    assert lowlat.offered(runner, N, K, 8) == [stock[2]]
    g1.close()
    assert lowlat.offered(runner, N, K, 8) == [stock[2]]
    assert stack.opened_tables() == (second,)
    g2.close()
    assert stack.opened_tables() == ()
    assert lowlat.offered(runner, N, K, 8) == stock


def test_a_generator_closed_in_another_thread_leaves_its_pins_there_too(pinning):
    runner = lowlat.runner()
    stock = lowlat.stock(N, K, 8)
    g = block(table(stock[1], "a"))
    next(g)
    assert lowlat.offered(runner, N, K, 8) == [stock[1]]
    with workers(name="closer") as pool:
        pool.start(g.close)
    assert stack.opened_tables() == ()
    assert lowlat.offered(runner, N, K, 8) == stock


async def bounded(wait: Any, task: asyncio.Task[Any]) -> None:
    """Wait for ``wait`` while ``task`` runs: fail with the task's exception if it ends first
    (it died before signalling), or after the bound."""
    waiting = asyncio.ensure_future(wait)
    done, _ = await asyncio.wait(
        {waiting, task}, timeout=WALL_BOUND_S, return_when="FIRST_COMPLETED"
    )
    if waiting not in done:
        waiting.cancel()
        if task in done:
            task.result()  # raises what the task raised
        pytest.fail(f"the task neither signalled nor ended in {WALL_BOUND_S} s", pytrace=False)


def test_tasks_inherit_open_blocks_until_they_close_and_abandoned_tasks_unwind(pinning):
    runner = lowlat.runner()
    stock = lowlat.stock(N, K, 8)
    seen: dict[str, Any] = {}

    async def child(started: asyncio.Event, go_on: asyncio.Event) -> None:
        seen["inherited"] = lowlat.offered(runner, N, K, 8)
        started.set()
        await go_on.wait()
        seen["after the block"] = lowlat.offered(runner, N, K, 8)

    async def abandoned(entered: asyncio.Event) -> None:
        with fi_patches.pinned_tactics(table(stock[3], "abandoned")):
            seen["abandoned"] = lowlat.offered(runner, N, K, 8)
            entered.set()
            await asyncio.Event().wait()  # never resumed

    async def main() -> None:
        started, go_on = asyncio.Event(), asyncio.Event()
        with fi_patches.pinned_tactics(table(stock[1], "outer")):
            task = asyncio.get_running_loop().create_task(child(started, go_on))
            await bounded(started.wait(), task)
        go_on.set()
        await asyncio.wait_for(task, WALL_BOUND_S)
        entered = asyncio.Event()
        loop = asyncio.get_running_loop()
        forgotten = loop.create_task(abandoned(entered))
        await bounded(entered.wait(), forgotten)
        del forgotten
        gc.collect()
        seen["main"] = lowlat.offered(runner, N, K, 8)

    loop = asyncio.new_event_loop()
    unexpected = quiet_pending_tasks(loop)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert unexpected == []
    gc.collect()
    assert seen == {
        "inherited": [stock[1]],
        "after the block": stock,
        "abandoned": [stock[3]],
        "main": stock,
    }
    assert stack.opened_tables() == ()


@pytest.mark.parametrize("order", ["lifo", "fifo"])
def test_threads_each_leave_exactly_their_own_blocks(pinning, order):
    runner = lowlat.runner()
    stock = lowlat.stock(N, K, 8)
    start = barrier(3)
    results: dict[int, list[Any]] = {}

    def worker(i: int) -> None:
        gens = [block(table(stock[i + 1], f"w{i}a")), block(table(stock[i + 2], f"w{i}b"))]
        for g in gens:
            next(g)
        start.wait()
        results[i] = [lowlat.offered(runner, N, K, 8)]
        for g in gens if order == "fifo" else reversed(gens):
            g.close()
            results[i].append(lowlat.offered(runner, N, K, 8))

    with workers(start) as pool:  # a worker dying before the barrier fails, never hangs
        for i in range(2):
            pool.start(worker, i)
        start.wait()
        assert lowlat.offered(runner, N, K, 8) == stock
    for i in range(2):
        middle = [stock[i + 2]] if order == "fifo" else [stock[i + 1]]
        assert results[i] == [[stock[i + 2]], middle, stock]
