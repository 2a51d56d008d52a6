"""Pins are identical on every tensor-parallel rank by construction: the candidate lists a
table yields depend only on the table and the problem, never on the rank, its environment or
its hash seed. FlashInfer's ``set_autotune_process_group`` all-reduces per-tactic timings and
deadlocks when ranks profile different candidate lists; this checks they cannot, with 4 real
ranks joined on gloo (:mod:`tests.process_group`), each with its own hash seed, that exchange
their lists through the group itself."""

from __future__ import annotations

import json

import pytest

from tests import cutedsl, lowlat
from tests.process_group import run_group

SHAPES = [(7168, 1536), (1536, 7168), (24576, 1536)]
WORLD = 4

BODY = """
import pytest, torch
from tests import simulation
simulation.install(pytest.MonkeyPatch())  # SIMULATION: sm_103 device properties on CPU
import fi_patches
from fi_patches.cute_dsl import cute_dsl_runner
from flashinfer.gemm import gemm_base
from tests.mxfp8_inputs import Mxfp8Problem
ll = gemm_base._cutedsl_low_latency_blockscaled_gemm_runner(103, True)
cute = cute_dsl_runner(10, 3, torch.bfloat16)
lists = {{}}
with fi_patches.pinned_tactics({table!r}):
    fingerprint = fi_patches.rank_guard(timeout=60).digest
    for n, k in {shapes!r}:
        for rows in range(1, 65):
            inputs = Mxfp8Problem(n, k, rows).runner_inputs()
            if rows <= 8:
                lists[f"ll {{n}}x{{k}} {{rows}}"] = [list(t) for t in ll.get_valid_tactics(inputs, None)]
            lists[f"cute {{n}}x{{k}} {{rows}}"] = [repr(t) for t in cute.get_valid_tactics(inputs, None)]
gathered = [None] * WORLD
dist.all_gather_object(gathered, lists)
report({{"lists": lists, "gathered": gathered, "fingerprint": fingerprint, "seed": os.environ["PYTHONHASHSEED"]}})
"""


@pytest.mark.simulated
def test_every_rank_sees_the_same_candidate_lists(simulated, tmp_path):
    ll_pin = lowlat.non_split_alternative(7168, 1536, 8)
    cute_pin = next(t for t in cutedsl.stock(7168, 1536, 64)[2:] if t[4] == 1)
    table = tmp_path / "pins.toml"
    table.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = 7168\nk = 1536\nmin_rows = 5\nmax_rows = 8\ntactic = {list(ll_pin)}\n\n"
        f"[[cute_dsl]]\nn = 7168\nk = 1536\nmin_rows = 33\nmax_rows = 64\ntactic = {json.dumps(cutedsl.as_toml(cute_pin))}\n"
    )
    outcomes = run_group(
        BODY.format(table=str(table), shapes=SHAPES),
        WORLD,
        tmp_path,
        limit=600,
        env=lambda rank: {"PYTHONHASHSEED": str(1000 + 7 * rank), "LOCAL_RANK": str(rank)},
    )
    for o in outcomes:
        assert o.returncode == 0, f"rank {o.rank} exited {o.returncode}:\n{o.stderr[-3000:]}"
    results = [o.result for o in outcomes]
    assert len({r["seed"] for r in results}) == WORLD  # each rank hashes differently
    assert len({r["fingerprint"] for r in results}) == 1  # the guard saw one table everywhere
    lists = results[0]["lists"]
    for r in results:  # what each rank received through the group is every rank's own lists
        assert r["gathered"] == [lists] * WORLD
        assert r["lists"] == lists
    assert lists["ll 7168x1536 8"] == [list(ll_pin)]
    assert lists["cute 7168x1536 64"] == [repr(cute_pin)]
    assert len(lists["ll 7168x1536 4"]) > 1 and len(lists["cute 1536x7168 64"]) > 1
