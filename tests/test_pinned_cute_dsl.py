"""Pinned cute-dsl tactics against FlashInfer's real cute-dsl runner and tuner (CPU, simulated
sm_103 device properties: the runner reads the SM count to list its tactics)."""

from __future__ import annotations

import logging

import pytest
import torch

import fi_patches
from fi_patches.compat import refresh
from fi_patches.cute_dsl import pinned_mm, workspace, workspace_helper
from fi_patches.pins import PinTableError
from tests import cutedsl
from tests.conftest import require_feature
from tests.mxfp8_inputs import Mxfp8Problem

N, K = 7168, 1536

pytestmark = pytest.mark.simulated


@pytest.fixture
def cute(simulated):
    refresh()
    require_feature("pinned_cute_dsl")
    return simulated


def pick(rows: int, *, split: bool = False, skip: int = 0):
    choices = [t for t in cutedsl.stock(N, K, rows)[1:] if (t[4] > 1) == split]
    return choices[skip]


def test_tuning_inside_the_context_profiles_only_the_pin(cute, tuner):
    import flashinfer

    pin = pick(64, skip=3)
    with fi_patches.pinned_tactics(cutedsl.table(cutedsl.entry(N, K, 33, 64, pin))):
        with flashinfer.autotune(True):
            with pytest.raises(Exception, match="CUDA"):
                flashinfer.mm_mxfp8(
                    *Mxfp8Problem(N, K, 64).mm_args(), out_dtype=torch.bfloat16, backend="cute-dsl"
                )
    assert cute.offered(64) == [pin]
    assert cute.offered(32, cutedsl.CLASS) == cutedsl.stock(N, K, 32)
    winners = cutedsl.cached(tuner, N, K)
    assert winners[64] == pin
    assert winners[32] != pin and winners[32][4] > 1  # the tuner's own pick: split-K wins alone


def test_a_bucket_tuned_before_is_retuned_over_the_pin(cute, tuner):
    import flashinfer

    problem = Mxfp8Problem(N, K, 64)
    with flashinfer.autotune(True), pytest.raises(Exception, match="CUDA"):
        flashinfer.mm_mxfp8(*problem.mm_args(), out_dtype=torch.bfloat16, backend="cute-dsl")
    before = cutedsl.cached(tuner, N, K)
    pin = pick(64, skip=5)
    assert before[64] != pin
    cute.clear()
    with fi_patches.pinned_tactics(cutedsl.table(cutedsl.entry(N, K, 33, 64, pin))):
        with flashinfer.autotune(True), pytest.raises(Exception, match="CUDA"):
            flashinfer.mm_mxfp8(*problem.mm_args(), out_dtype=torch.bfloat16, backend="cute-dsl")
    assert cute.rows_profiled() == [64]
    assert cute.offered(64) == [pin]
    after = cutedsl.cached(tuner, N, K)
    assert after[64] == pin
    assert {r: t for r, t in after.items() if r != 64} == {
        r: t for r, t in before.items() if r != 64
    }


def test_pinned_mm_runs_the_pin_without_the_tuner(cute, monkeypatch):
    from flashinfer.autotuner import AutoTuner

    pin = pick(128, skip=2)
    table = cutedsl.table(cutedsl.entry(N, K, 65, 128, pin))
    calls = cutedsl.record_forward(monkeypatch)
    tuned = []
    original = AutoTuner.choose_one
    monkeypatch.setattr(
        AutoTuner, "choose_one", lambda self, *a, **k: tuned.append(a) or original(self, *a, **k)
    )
    for rows in (65, 100, 128):
        t = Mxfp8Problem(N, K, rows).tensors()
        with pytest.raises(Exception, match="CUDA"):
            pinned_mm(t["a"], t["a_scale"], t["b"], t["b_scale"], pins=table)
    assert [c["tactic"] for c in calls] == [pin, pin, pin]
    assert tuned == []


def test_pinned_mm_passes_mm_mxfp8s_own_workspace(cute, monkeypatch):
    import flashinfer

    name, _ = workspace_helper()
    expected = (
        "_get_stream_cache_buf"
        if hasattr(__import__("flashinfer.gemm.gemm_base").gemm.gemm_base, "_get_stream_cache_buf")
        else "_get_cache_buf"
    )
    assert name.endswith(expected)
    pin = pick(128)
    calls = cutedsl.record_forward(monkeypatch)
    t = Mxfp8Problem(N, K, 128).tensors()
    with pytest.raises(Exception, match="CUDA"):
        pinned_mm(
            t["a"],
            t["a_scale"],
            t["b"],
            t["b_scale"],
            pins=cutedsl.table(cutedsl.entry(N, K, 65, 128, pin)),
        )
    with pytest.raises(Exception, match="CUDA"):
        flashinfer.mm_mxfp8(
            t["a"], t["b"], t["a_scale"], t["b_scale"], out_dtype=torch.bfloat16, backend="cute-dsl"
        )
    assert calls[0]["workspace"] is calls[1]["workspace"] is workspace(t["a"].device)


def test_a_pin_that_cannot_run_here_falls_back_to_stock_with_one_warning(cute, monkeypatch, caplog):
    split_pin = pick(32, split=True)  # split-K runs at 32 rows, not at 64
    table = cutedsl.table(cutedsl.entry(N, K, 33, 64, split_pin), source="pins.toml")
    calls = cutedsl.record_forward(monkeypatch)
    t = Mxfp8Problem(N, K, 64).tensors()
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        for _ in range(2):
            with pytest.raises(Exception, match="CUDA"):
                pinned_mm(t["a"], t["a_scale"], t["b"], t["b_scale"], pins=table)
    assert all(c["tactic"] != split_pin for c in calls) and len(calls) == 2
    warnings = [r.getMessage() for r in caplog.records if "runs stock mm_mxfp8" in r.getMessage()]
    assert len(warnings) == 1
    assert "pins.toml [[cute_dsl]] #1" in warnings[0] and "rows=64" in warnings[0]


def test_no_pin_is_stock_mm_mxfp8(cute, monkeypatch):
    calls = cutedsl.record_forward(monkeypatch)
    t = Mxfp8Problem(N, K, 64).tensors()
    with pytest.raises(Exception, match="CUDA"):
        pinned_mm(t["a"], t["a_scale"], t["b"], t["b_scale"], pins=cutedsl.table())
    assert [c["tactic"] for c in calls] == [-1]  # the tuner's untuned fallback, as stock


def test_pinned_tactics_rejects_a_cute_dsl_pin_the_runner_cannot_run(cute):
    split_pin = pick(32, split=True)
    table = cutedsl.table(cutedsl.entry(N, K, 33, 64, split_pin), source="bad.toml")
    with pytest.raises(PinTableError) as error:
        with fi_patches.pinned_tactics(table):
            pytest.fail("applied")
    message = str(error.value)
    assert "bad.toml: [[cute_dsl]] #1: tactic = " in message
    assert "cannot run as pinned for n=7168 k=1536 rows=33" in message


def test_without_the_device_the_feature_says_why(sm103):
    from fi_patches.compat import status_of
    from tests.conftest import require_release_supports

    require_release_supports("pinned_cute_dsl")
    record = status_of("pinned_cute_dsl")
    assert not record.enabled
    assert "reads the CUDA device's SM count to list its tactics" in record.reason
