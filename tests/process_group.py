"""Start N real processes that join one torch.distributed group on gloo (CPU, rendezvous on
127.0.0.1 at a free port), run the same script, and report one JSON result each; a wall-clock limit is enforced on the whole group, so
a hang kills every process and fails the test instead of stalling CI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULT = "RESULT "

PREAMBLE = """
import json, os, sys, datetime
sys.path.insert(0, {root!r})
import torch.distributed as dist
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group(
    "gloo", init_method=os.environ["FI_TEST_INIT"], rank=RANK, world_size=WORLD,
    timeout=datetime.timedelta(seconds=60),
)
def report(value):
    print({result!r} + json.dumps(value), flush=True)
"""


@dataclass
class RankOutcome:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self) -> Any:
        lines = [line for line in self.stdout.splitlines() if line.startswith(RESULT)]
        if not lines:
            raise AssertionError(
                f"rank {self.rank} reported nothing (rc={self.returncode}):\n{self.stderr[-3000:]}"
            )
        return json.loads(lines[-1][len(RESULT) :])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_group(
    body: str,
    world: int,
    tmp_path: Path,
    *,
    limit: float,
    env: Callable[[int], dict[str, str]] | None = None,
) -> list[RankOutcome]:
    """Run ``body`` (after a preamble that joins the group; ``report(value)`` records a rank's
    result) in ``world`` processes. Every process is killed and the test fails when the group
    has not finished ``limit`` seconds after the start."""
    init = f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "rank.py"
    script.write_text(PREAMBLE.format(root=str(ROOT), result=RESULT) + body)
    base = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    base.update(FI_PATCHES_DEVICE="sm_103", WORLD_SIZE=str(world), FI_TEST_INIT=init)
    procs = []
    logs = []
    for rank in range(world):
        out, err = tmp_path / f"rank{rank}.out", tmp_path / f"rank{rank}.err"
        logs.append((out, err))
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script)],
                env={**base, "RANK": str(rank), **(env(rank) if env else {})},
                stdout=out.open("w"),
                stderr=err.open("w"),
            )
        )
    deadline = time.monotonic() + limit
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    stuck = [rank for rank, p in enumerate(procs) if p.poll() is None]
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    outcomes = [
        RankOutcome(rank, p.returncode, out.read_text(), err.read_text())
        for rank, (p, (out, err)) in enumerate(zip(procs, logs, strict=True))
    ]
    if stuck:
        tails = "\n".join(f"--- rank {o.rank}:\n{o.stderr[-1500:]}" for o in outcomes)
        pytest.fail(f"ranks {stuck} still ran after {limit:g} s and were killed\n{tails}")
    return outcomes
