"""``pinned_tactics(mode="preseed")``: pinned buckets are served from the tuner's cache, so
tuning profiles nothing for them; the cache's previous entries come back on exit (CPU,
simulated sm_103)."""

from __future__ import annotations

import functools

import pytest
import torch

import fi_patches
from fi_patches.pins import PinTable
from tests import cutedsl, lowlat
from tests.mxfp8_inputs import Mxfp8Problem

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


def test_pinned_buckets_profile_nothing_and_the_pin_is_chosen(both, tuner):
    ll_pin = lowlat.non_split_alternative(N, K, 8)
    cute_pin = next(t for t in cutedsl.stock(N, K, 64)[3:] if t[4] == 1)
    with fi_patches.pinned_tactics(table(ll_pin, cute_pin), mode="preseed"):
        tune("cutedsl_low_latency", 8)
        tune("cute-dsl", 128)
        assert both.offered(8, lowlat.LL_CLASS) == []
        assert both.offered(64, cutedsl.CLASS) == [] and both.offered(128, cutedsl.CLASS) == []
        assert both.offered(4, lowlat.LL_CLASS) == lowlat.stock(N, K, 4)  # unpinned: tuned as stock
        assert lowlat.cached_low_latency(tuner, N, K)[8] == ll_pin
        assert cutedsl.cached(tuner, N, K)[64] == cutedsl.cached(tuner, N, K)[128] == cute_pin
    assert 8 not in lowlat.cached_low_latency(tuner, N, K)  # the seed is gone; no entry before
    assert 64 not in cutedsl.cached(tuner, N, K)
    assert lowlat.cached_low_latency(tuner, N, K)[4] == tuple(
        lowlat.cached_low_latency(tuner, N, K)[4]
    )


def test_previous_entries_come_back_on_exit(both, tuner):
    tune("cutedsl_low_latency", 8)
    before = dict(tuner.profiling_cache)
    ll_pin = lowlat.non_split_alternative(N, K, 8, skip=2)
    assert lowlat.cached_low_latency(tuner, N, K)[8] != ll_pin
    cute_pin = next(t for t in cutedsl.stock(N, K, 64)[3:] if t[4] == 1)
    with fi_patches.pinned_tactics(table(ll_pin, cute_pin), mode="preseed"):
        assert lowlat.cached_low_latency(tuner, N, K)[8] == ll_pin
    after = dict(tuner.profiling_cache)
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)


def test_an_unknown_mode_is_refused(pinning):
    with pytest.raises(ValueError, match="mode must be one of narrow, preseed"):
        with fi_patches.pinned_tactics(None, mode="eager"):
            pass


class RefusesNthWrite(dict):
    """FlashInfer's own policy store, made to refuse its ``n``-th write (fault injection on the
    real tuner singleton's attribute; the monkeypatch restores it)."""

    def __init__(self, data, n):
        super().__init__(data)
        self.writes, self.n = 0, n

    def __setitem__(self, key, value):
        self.writes += 1
        if self.writes == self.n:
            raise MemoryError("store full")
        super().__setitem__(key, value)


def test_a_refused_seed_leaves_nothing_seeded_and_names_the_tuner(both, tuner, monkeypatch):
    tune("cutedsl_low_latency", 8)
    winners_before = dict(tuner.profiling_cache)
    policies = RefusesNthWrite(tuner._profiling_cache_policies, n=3)
    monkeypatch.setattr(tuner, "_profiling_cache_policies", policies)
    policies_before = dict(policies)
    ll_pin = lowlat.non_split_alternative(N, K, 8, skip=2)
    cute_pin = next(t for t in cutedsl.stock(N, K, 64)[3:] if t[4] == 1)
    with pytest.raises(
        fi_patches.InternalError, match=r"seeds, then refused one \(MemoryError: store full\)"
    ):
        with fi_patches.pinned_tactics(table(ll_pin, cute_pin), mode="preseed"):
            pytest.fail("the block must not be entered")
    assert policies.writes >= policies.n  # the refused write, then the undo's own
    assert dict(tuner.profiling_cache) == winners_before
    assert dict(policies) == policies_before


def test_a_seed_whose_key_cannot_be_built_writes_nothing(both, tuner, monkeypatch):
    from flashinfer.autotuner import AutoTuner

    from fi_patches.compat import status_of

    tune("cutedsl_low_latency", 8)
    assert status_of("preseed").enabled  # judged before the fault, as in a serving process
    winners_before = dict(tuner.profiling_cache)
    real = AutoTuner._get_cache_key.__func__
    calls = []

    @functools.wraps(real)
    def refuses_second(cls, *args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise KeyError("no key")
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(AutoTuner, "_get_cache_key", classmethod(refuses_second))
    ll_pin = lowlat.non_split_alternative(N, K, 8, skip=2)
    cute_pin = next(t for t in cutedsl.stock(N, K, 64)[3:] if t[4] == 1)
    with pytest.raises(fi_patches.InternalError, match="took 0 seeds"):
        with fi_patches.pinned_tactics(table(ll_pin, cute_pin), mode="preseed"):
            pytest.fail("the block must not be entered")
    assert len(calls) == 2
    assert dict(tuner.profiling_cache) == winners_before
