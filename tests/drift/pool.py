"""Run drift jobs on a few zygotes (``zygote.py``) in parallel: first the pin table, then the
baseline and every case, each in a fresh fork with a timeout."""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tests.drift.cases import BASELINE, Case

ROOT = Path(__file__).resolve().parents[2]

JOBS_ENV = "DRIFT_JOBS"
"""How many zygotes run cases at once (default 2: the CI machines have 2 cores)."""

TIMEOUT_ENV = "DRIFT_CASE_TIMEOUT"
"""Seconds one case may run before its process is killed (default 180)."""

_START_TIMEOUT = 300.0


class Unavailable(Exception):
    """FlashInfer cannot be imported here, so there is nothing to break."""


@dataclass
class Results:
    """Every job's observation (``harness_error`` when its process failed), by case id."""

    version: str
    table: dict[str, Any]
    observations: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    workers: int = 0
    directory: Path = Path()


def _modules() -> list[str]:
    from fi_patches.internals import OneOf, declared

    found: list[str] = []
    for internal in declared():
        for option in internal.options if isinstance(internal, OneOf) else (internal,):
            found.append(option.module)
    return list(dict.fromkeys(found))


def _readline(stream: TextIO, timeout: float) -> str:
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else ""


class Zygote:
    """One zygote process and the jobs sent to it, one at a time."""

    def __init__(self, directory: Path, index: int) -> None:
        self.log = directory / f"zygote{index}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.drift.zygote", json.dumps(_modules())],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
                ),
            },
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout

    def ready(self) -> dict[str, Any]:
        line = _readline(self.stdout, _START_TIMEOUT)
        if not line:
            self.close()
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the drift zygote did not start: {tail}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        self.stdin.write(json.dumps(job) + "\n")
        self.stdin.flush()
        line = _readline(self.stdout, float(job["timeout"]) + 60)
        if not line:
            raise RuntimeError(f"the drift zygote stopped answering (see {self.log})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        if self.process.poll() is None:
            self.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def make_job(
    directory: Path, name: str, table: Path, timeout: float, **fields: Any
) -> dict[str, Any]:
    """A job line for a zygote (its files in ``directory``, named ``name``)."""
    for stale in (directory / f"{name}.json", directory / f"{name}.log"):
        stale.unlink(missing_ok=True)
    return {
        "id": name,
        "out": str(directory / f"{name}.json"),
        "log": str(directory / f"{name}.log"),
        "table": str(table),
        "timeout": timeout,
        **fields,
    }


def read_outcome(job: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """The observation the job's child wrote, or ``harness_error`` with its log's tail."""
    out = Path(job["out"])
    if reply["status"] == "ok" and out.exists():
        observation: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    else:
        log = Path(job["log"])
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        observation = {"harness_error": f"{reply['status']} {reply['detail']}; log tail:\n{tail}"}
    observation["log"] = job["log"]
    observation["wall_seconds"] = reply.get("seconds")
    return observation


def run(cases: list[Case], directory: Path, workers: int | None = None) -> Results:
    """The baseline and every case of ``cases``, run on ``workers`` zygotes."""
    started = time.monotonic()
    workers = workers or int(os.environ.get(JOBS_ENV) or 2)
    timeout = float(os.environ.get(TIMEOUT_ENV) or 180)
    directory.mkdir(parents=True, exist_ok=True)
    zygotes = [Zygote(directory, i) for i in range(max(1, workers))]
    try:
        replies = [z.ready() for z in zygotes]
        if "import_error" in replies[0]:
            raise Unavailable(f"import flashinfer fails here ({replies[0]['import_error']})")
        table_path = directory / "pins.json"
        table_job = make_job(directory, "table", table_path, timeout, job="table")
        table = read_outcome(table_job, zygotes[0].run(table_job))
        if "harness_error" in table:
            raise RuntimeError(f"the drift pin table could not be made: {table['harness_error']}")
        results = Results(replies[0]["version"], table, workers=len(zygotes), directory=directory)
        todo: queue.Queue[dict[str, Any]] = queue.Queue()
        todo.put(make_job(directory, BASELINE, table_path, timeout, job="case"))
        for case in cases:
            fields = {"job": "case", "key": case.key, "mutation": case.mutation}
            todo.put(make_job(directory, case.id, table_path, timeout, **fields))
        lock = threading.Lock()

        def work(zygote: Zygote) -> None:
            while True:
                try:
                    job = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    outcome = read_outcome(job, zygote.run(job))
                except Exception as exc:
                    outcome = {"harness_error": f"{exc}", "log": job["log"]}
                with lock:
                    results.observations[job["id"]] = outcome

        threads = [threading.Thread(target=work, args=(z,), daemon=True) for z in zygotes]
        for thread in threads:
            thread.start()
        # Each case is killed past its timeout, so the whole run is bounded; a worker still
        # alive past that bound is a harness bug, reported rather than waited on forever.
        deadline = time.monotonic() + (len(cases) + 2) * (timeout + 60)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            raise RuntimeError(f"drift workers still running past the run's bound: {stuck}")
    finally:
        for zygote in zygotes:
            zygote.close()
    results.seconds = round(time.monotonic() - started, 1)
    return results
