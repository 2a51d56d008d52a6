"""What the rank guard costs: wall time of ``fi_patches.rank_guard()`` at 2, 4 and 8 gloo
ranks on CPU, next to a bare ``all_gather_object`` of the same payload (the fingerprint's
bytes) in the same run.

Each world size starts its ranks as processes on 127.0.0.1 with the real FlashInfer (targeting
sm_103 offline) and ``fi_patches.auto`` on a one-entry pin table. After a warm-up, guard and
bare collective alternate, which goes first swapping every round, each after a barrier; a
round's time is the slowest rank's, and the table shows medians over the rounds.
    python benchmarks/rank_guard.py [--worlds 2 4 8] [--rounds 41]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 1.2
TARGET_MS_AT_8 = 50.0
TABLE = """[meta]
device = "sm_103"
flashinfer = ">=0.7.0"

[[low_latency]]
n = 7168
k = 1536
min_rows = 5
max_rows = 8
tactic = [128, 7, 1, 1]
"""


def rank_main(rank: int, world: int, init: str, rounds: int) -> None:
    import datetime

    import torch.distributed as dist

    import fi_patches
    import fi_patches.auto  # pins on, as a serving rank runs
    from fi_patches.ranks.guard import local_fingerprint

    dist.init_process_group(
        "gloo",
        init_method=init,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=300),
    )
    payload = local_fingerprint().to_bytes()
    for _ in range(3):  # warm-up: feature verdicts, connections
        fi_patches.rank_guard(timeout=120)
        dist.all_gather_object([None] * world, payload)
    guard, bare = [], []

    def timed_guard() -> None:
        dist.barrier()
        start = time.perf_counter()
        fi_patches.rank_guard(timeout=120)
        guard.append(time.perf_counter() - start)

    def timed_bare() -> None:
        dist.barrier()
        start = time.perf_counter()
        dist.all_gather_object([None] * world, payload)
        bare.append(time.perf_counter() - start)

    for i in range(rounds):
        first, second = (timed_guard, timed_bare) if i % 2 == 0 else (timed_bare, timed_guard)
        first()
        second()
    every: list = [None] * world
    dist.all_gather_object(every, (guard, bare, len(payload)))
    if rank == 0:
        print(json.dumps(every), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_world(world: int, rounds: int, pins: Path) -> tuple[float, float, int]:
    init = f"tcp://127.0.0.1:{free_port()}"
    env = {**os.environ, "FI_PATCHES_DEVICE": "sm_103", "FI_PATCHES_PINS": str(pins)}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", str(r), str(world), init, str(rounds)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for r in range(world)
    ]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed at world size {world}")
    every = json.loads(outputs[0].strip().splitlines()[-1])
    slowest_guard = [max(rank[0][i] for rank in every) for i in range(rounds)]
    slowest_bare = [max(rank[1][i] for rank in every) for i in range(rounds)]
    return statistics.median(slowest_guard), statistics.median(slowest_bare), every[0][2]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "pins.toml"
        pins.write_text(TABLE)
        results = [(w, *run_world(w, args.rounds, pins)) for w in args.worlds]
    print(
        f"rank_guard() vs all_gather_object of the same payload, gloo on CPU "
        f"({os.cpu_count()} cores), median of {args.rounds} alternating rounds, slowest rank"
    )
    print(f"{'ranks':>5}{'payload B':>11}{'bare ms':>10}{'guard ms':>10}{'ratio':>8}  targets")
    ok = True
    for world, guard, bare, size in results:
        ratio = guard / bare
        meets = ratio <= TARGET_RATIO and (world != 8 or guard * 1e3 <= TARGET_MS_AT_8)
        ok = ok and meets
        target = f"<= {TARGET_RATIO}x" + (f", <= {TARGET_MS_AT_8:.0f} ms" if world == 8 else "")
        print(
            f"{world:>5}{size:>11}{bare * 1e3:>10.2f}{guard * 1e3:>10.2f}{ratio:>8.2f}  "
            f"{target}: {'yes' if meets else 'NO'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
