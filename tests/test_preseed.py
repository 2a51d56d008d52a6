"""``pinned_tactics(mode="preseed")``: pinned buckets are served from the tuner's cache, so
tuning profiles nothing for them; the cache's previous entries come back on exit (CPU,
simulated sm_103)."""

from __future__ import annotations

import pytest
import torch

import fi_patches
from fi_patches.pins import PinTable
from tests import cutedsl, lowlat
from tests.mxfp8_inputs import Mxfp8Problem
from tests.workers import workers

N, K = lowlat.SHAPE

pytestmark = pytest.mark.simulated


def tune(backend: str, rows: int) -> None:
    import flashinfer

    with flashinfer.autotune(True), pytest.raises(Exception, match="CUDA"):
        flashinfer.mm_mxfp8(
            *Mxfp8Problem(N, K, rows).mm_args(), out_dtype=torch.bfloat16, backend=backend
        )


def table(ll_pin, cute_pin) -> PinTable:
    return PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
            "low_latency": [lowlat.entry(N, K, 5, 8, ll_pin)],
            "cute_dsl": [cutedsl.entry(N, K, 33, 128, cute_pin)],
        }
    )


def test_pinned_buckets_profile_nothing_and_the_pin_serves(both, tuner):
    ll_pin = lowlat.non_split_alternative(N, K, 8)
    cute_pin = next(t for t in cutedsl.stock(N, K, 64)[3:] if t[4] == 1)
    with fi_patches.pinned_tactics(table(ll_pin, cute_pin), mode="preseed"):
        tune("cutedsl_low_latency", 8)
        tune("cute-dsl", 128)
        assert both.offered(8, lowlat.LL_CLASS) == []
        assert both.offered(64, cutedsl.CLASS) == [] and both.offered(128, cutedsl.CLASS) == []
        assert both.offered(4, lowlat.LL_CLASS) == lowlat.stock(N, K, 4)  # unpinned: tuned as stock
        assert lowlat.served(tuner, N, K, 8) == ll_pin
        assert cutedsl.served(tuner, N, K, 64) == cutedsl.served(tuner, N, K, 128) == cute_pin
        assert lowlat.served(tuner, N, K, 4) == lowlat.cached_low_latency(tuner, N, K)[4]
    # the pins were answered, never written: FlashInfer's cache holds only what it tuned
    assert 8 not in lowlat.cached_low_latency(tuner, N, K)
    assert 64 not in cutedsl.cached(tuner, N, K)
    assert lowlat.served(tuner, N, K, 8) is None
    assert set(lowlat.cached_low_latency(tuner, N, K)) == {1, 2, 4}


def test_the_cache_is_left_exactly_as_it_was(both, tuner):
    tune("cutedsl_low_latency", 8)
    before = dict(tuner.profiling_cache)
    ll_pin = lowlat.non_split_alternative(N, K, 8, skip=2)
    assert lowlat.cached_low_latency(tuner, N, K)[8] != ll_pin
    cute_pin = next(t for t in cutedsl.stock(N, K, 64)[3:] if t[4] == 1)
    with fi_patches.pinned_tactics(table(ll_pin, cute_pin), mode="preseed"):
        assert lowlat.served(tuner, N, K, 8) == ll_pin  # the pin wins over the cached winner
    after = dict(tuner.profiling_cache)
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)
    assert lowlat.served(tuner, N, K, 8) == lowlat.cached_low_latency(tuner, N, K)[8]


def test_preseed_is_local_to_the_context(both, tuner):
    ll_pin = lowlat.non_split_alternative(N, K, 8)
    seen = []
    with fi_patches.pinned_tactics(table(ll_pin, cutedsl.stock(N, K, 64)[0]), mode="preseed"):
        with workers() as pool:
            pool.start(lambda: seen.append(lowlat.served(tuner, N, K, 8)))
        assert lowlat.served(tuner, N, K, 8) == ll_pin
    assert seen == [None]


def test_an_unknown_mode_is_refused(pinning):
    with pytest.raises(ValueError, match="mode must be one of narrow, preseed"):
        with fi_patches.pinned_tactics(None, mode="eager"):
            pass
