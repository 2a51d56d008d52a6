"""The rank guard's first and second call per rank: 2 gloo ranks on CPU, each a fresh process
targeting sm_103 offline (the first call imports FlashInfer and computes ``status()``), over
three starts sharing one self-check cache (the first start computes it).

    python benchmarks/rank_guard_first_call.py
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTS = 3
WORLD = 2


def rank_main(rank: int, init: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=init,
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=300),
    )
    import fi_patches

    dist.barrier()
    start = time.perf_counter()
    fi_patches.rank_guard(timeout=300)
    first = time.perf_counter() - start
    dist.barrier()
    start = time.perf_counter()
    fi_patches.rank_guard(timeout=300)
    second = time.perf_counter() - start
    Path(out).write_text(json.dumps({"first_s": first, "second_ms": second * 1e3}))
    dist.destroy_process_group()


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "FI_PATCHES_DEVICE": "sm_103", "FI_PATCHES_CACHE_DIR": scratch}
        print("start  rank  first call (s)  second call (ms)")
        for start in range(STARTS):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            outs = [f"{scratch}/rank{r}.json" for r in range(WORLD)]
            ranks = [
                subprocess.Popen(
                    [sys.executable, __file__, str(r), f"tcp://127.0.0.1:{port}", outs[r]], env=env
                )
                for r in range(WORLD)
            ]
            for process in ranks:
                process.wait()
            for r, out in enumerate(outs):
                data = json.loads(Path(out).read_text())
                print(f"{start:5}  {r:4}  {data['first_s']:14.2f}  {data['second_ms']:16.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 4:
        rank_main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
    else:
        main()
