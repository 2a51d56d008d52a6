"""FlashInfer's MXFP8 runners as chain ops, with the real FlashInfer on CPU (simulated sm_103):
they list FlashInfer's own tactics, build the inputs ``mm_mxfp8`` passes, and launch through
the runners' own ``forward`` up to the kernel launch, which fails on CPU."""

from __future__ import annotations

import pytest
import torch

from fi_patches.chain.ops import mxfp8_op
from fi_patches.chain.plan import build_plan, check_tuner_buckets
from fi_patches.chain.select import candidates_for
from fi_patches.chain.spec import Bucket, ChainSpec, ChainSpecError
from fi_patches.chain.timing import Trial, chain_position, run_chain
from fi_patches.pins.table import PinTable
from fi_patches.wide.tactics import wide_tactics
from tests import cutedsl, lowlat
from tests.chain_helpers import EXAMPLE, cpu_only

pytestmark = pytest.mark.simulated


def test_every_internal_the_chain_uses_resolves_on_this_flashinfer(pinning):
    from fi_patches.internals import flashinfer as fi

    used = (fi.LOW_LATENCY_RUNNER, fi.REORDER_SCALE_FACTORS, fi.MM_MXFP8, fi.AUTOTUNE)
    assert [i.probe() for i in used] == [None] * len(used)


def test_the_example_plan_lists_flashinfer_s_own_tactics(both):
    spec = ChainSpec.from_file(EXAMPLE)
    plan = build_plan(spec, sm_version=103)
    assert [len(slots) for _, slots in plan] == [3] * len(spec.buckets)
    by_label = {bucket.label: (bucket, slots) for bucket, slots in plan}
    bucket, slots = by_label["5..8"]
    assert [s.coordinate for s in slots] == [
        "low_latency 2112x7168",
        "low_latency 6144x1536",
        "low_latency 7168x4096",
    ]
    for slot, (n, k) in zip(slots, ((2112, 7168), (6144, 1536), (7168, 4096)), strict=True):
        assert candidates_for(bucket, [slot], 0) == lowlat.stock(n, k, 8)
    bucket, slots = by_label["17..32"]
    assert candidates_for(bucket, [slots[1]], 0) == [(32, *t) for t in wide_tactics(6144, 1536, 32)]
    bucket, slots = by_label["65..128"]
    offered = candidates_for(bucket, [slots[2]], 0)
    assert offered and set(offered) <= set(cutedsl.stock(7168, 4096, 128))
    assert candidates_for(bucket, [slots[2]], 5) == offered[:5]


def test_ops_of_one_weight_on_one_runner_share_a_coordinate(pinning):
    spec = ChainSpec.from_mapping(
        {
            "bucket": [{"min_rows": 5, "max_rows": 8}],
            "op": [
                {"name": "q", "n": 1536, "k": 7168, "runner": "low_latency"},
                {"name": "k", "n": 1536, "k": 7168, "runner": "low_latency"},
            ],
        }
    )
    [(_, slots)] = build_plan(spec, sm_version=103)
    assert slots[0].coordinate == slots[1].coordinate == "low_latency 1536x7168"


def test_current_pins_are_read_as_each_runner_spells_its_tactics(both):
    table = PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": "==0.7.4"},
            "low_latency": [
                {"n": 6144, "k": 1536, "min_rows": 5, "max_rows": 8, "tactic": [256, 4, 1, 1]}
            ],
            "wide": [{"n": 6144, "k": 1536, "tile": 32, "tactic": [128, 6, 1, 1]}],
            "cute_dsl": [
                {
                    "n": 6144,
                    "k": 1536,
                    "max_rows": 128,
                    "tactic": [[128, 64], [1, 1], False, True, 1],
                }
            ],
        }
    )
    pins = {}
    for section, rows in (("low_latency", 8), ("wide", 32), ("cute_dsl", 128)):
        op = mxfp8_op("wq_b", section, 6144, 1536, 103)
        bucket = Bucket(rows // 2 + 1, rows, rows, 1)
        pins[section] = op.pin_of(table, bucket)
        assert op.pin_of(None, bucket) is None
        entry = op.pin_entry(bucket, pins[section])
        assert entry["tactic"] == table.to_mapping()[section][0]["tactic"]
    assert pins == {
        "low_latency": (256, 4, 1, 1),
        "wide": (32, 128, 6, 1, 1),
        "cute_dsl": ((128, 64), (1, 1), False, True, 1),
    }


@cpu_only
@pytest.mark.parametrize(("section", "rows"), [("low_latency", 8), ("cute_dsl", 128)])
def test_ops_launch_through_the_runner_s_forward_up_to_the_kernel(simulated, section, rows):
    op = mxfp8_op("wq_b", section, 6144, 1536, 103, device="cpu")
    inputs = op.inputs(rows)
    assert op.inputs(rows) is inputs  # built once
    a, b, a_scale, b_scale, out_dtype, out, workspace = inputs
    assert (a.shape, a.dtype) == ((rows, 1536), torch.float8_e4m3fn)
    assert b.shape == (1536, 6144) and b.t().is_contiguous()
    assert out.shape == (rows, 6144) and out_dtype == out.dtype == torch.bfloat16
    assert a_scale.dtype == b_scale.dtype == torch.uint8 and workspace.numel() > 0
    tactic = op.tactics(rows)[0]
    trial = Trial(rows, ("wq_b",), (tactic,), (op,))
    with pytest.raises(AssertionError, match="CUDA"):  # FlashInfer asks torch for the stream
        run_chain(trial, [inputs])
    assert chain_position() is None


def test_the_low_latency_forward_checks_the_tactic_it_is_given(simulated):
    op = mxfp8_op("wq_b", "low_latency", 6144, 1536, 103, device="cpu")
    with pytest.raises(ValueError, match="Invalid low-latency GEMM tactic"):
        op.launch(op.inputs(8), (999, 1, 1, 1))


@cpu_only
def test_the_wide_op_compiles_its_tactic_and_stops_at_the_launch(simulated):
    op = mxfp8_op("wq_b", "wide", 6144, 1536, 103, device="cpu")
    with pytest.raises(ValueError, match="wide kernels run on CUDA tensors"):
        op.launch(op.inputs(16), (16, 128, 8, 1, 1))


def test_chain_buckets_must_be_whole_tuner_buckets(pinning):
    from fi_patches.pinning.validate import mxfp8_bucket_of

    spec = ChainSpec.from_mapping(
        {
            "bucket": [{"min_rows": 5, "max_rows": 7}, {"min_rows": 65, "max_rows": 100}],
            "op": [{"name": "a", "n": 256, "k": 512, "runner": "mxfp8"}],
        },
        source="c.toml",
    )
    with pytest.raises(ChainSpecError) as info:
        check_tuner_buckets(spec, mxfp8_bucket_of())
    assert [str(p) for p in info.value.problems] == [
        "c.toml: [[bucket]] #1: max_rows = 7: rows 5..7 split FlashInfer's tuner bucket of "
        "rows 5..8, which caches one tactic for all of them",
        "c.toml: [[bucket]] #2: max_rows = 100: rows 65..100 split FlashInfer's tuner bucket "
        "of rows 65..128, which caches one tactic for all of them",
    ]
    check_tuner_buckets(ChainSpec.from_file(EXAMPLE), mxfp8_bucket_of())


def test_a_missing_internal_is_an_internal_error_naming_it(tmp_path, pinning):
    import subprocess
    import sys

    from fi_patches.internals import flashinfer as fi

    script = (
        "import importlib\n"
        f"module = importlib.import_module({fi.LOW_LATENCY!r})\n"
        "del module.reorder_scale_factors\n"
        "from fi_patches.internals import InternalError, flashinfer as fi\n"
        "print(fi.REORDER_SCALE_FACTORS.probe())\n"
        "try:\n"
        "    fi.reorder_scale_factors()(None, 1, 32)\n"
        "except InternalError as exc:\n"
        "    print('raised', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert "reorder_scale_factors is missing (AttributeError" in done.stdout
    assert "raised flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm" in done.stdout
