"""``pinned_tactics()`` against FlashInfer's real low-latency runner and tuner (CPU)."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest

import fi_patches
from fi_patches.pinning.installation import installed_count
from fi_patches.pins import PinTableError
from tests import lowlat
from tests.mxfp8_inputs import Mxfp8Problem
from tests.workers import barrier, workers

N, K = lowlat.SHAPE


@pytest.fixture
def pin(pinning: str) -> tuple[int, ...]:
    return lowlat.non_split_alternative(N, K, 8)


def test_runner_made_before_the_context_offers_only_the_pin(pin):
    runner = lowlat.runner()
    before = lowlat.offered(runner, N, K, 8)
    assert before == lowlat.stock(N, K, 8) and len(before) > 1
    with fi_patches.pinned_tactics(lowlat.table(lowlat.entry(N, K, 5, 8, pin))):
        for rows in range(5, 9):
            assert lowlat.offered(runner, N, K, rows) == [pin]
        for rows in range(1, 5):
            assert lowlat.offered(runner, N, K, rows) == lowlat.stock(N, K, rows)
        other_n, other_k = lowlat.OTHER_SHAPE
        assert lowlat.offered(runner, other_n, other_k, 8) == lowlat.stock(other_n, other_k, 8)
    assert lowlat.offered(runner, N, K, 8) == before


def test_runner_first_made_inside_the_context_is_stock_after_it(pin):
    lowlat.clear_factory_cache()
    with fi_patches.pinned_tactics(lowlat.table(lowlat.entry(N, K, 5, 8, pin))):
        inside = lowlat.runner()
        assert lowlat.offered(inside, N, K, 8) == [pin]
    assert lowlat.offered(inside, N, K, 8) == lowlat.stock(N, K, 8)
    assert lowlat.offered(lowlat.runner(), N, K, 8) == lowlat.stock(N, K, 8)


@pytest.mark.simulated
@pytest.mark.parametrize("first_call", ["before", "inside"])
def test_tuning_mm_mxfp8_inside_the_context_chooses_the_pin(first_call, pin, simulated, tuner):
    import flashinfer

    problem = Mxfp8Problem(N, K, 8)
    if first_call == "before":
        lowlat.mm(flashinfer, problem)  # serving call: builds the runner, caches nothing
        assert lowlat.cached_low_latency(tuner, N, K) == {}
    else:
        lowlat.clear_factory_cache()
    with fi_patches.pinned_tactics(lowlat.table(lowlat.entry(N, K, 5, 8, pin))):
        with flashinfer.autotune(True):
            lowlat.mm(flashinfer, problem)
    assert simulated.offered(8, lowlat.LL_CLASS) == [pin]
    for rows in (1, 2, 4):
        offered = simulated.offered(rows, lowlat.LL_CLASS)
        assert offered == lowlat.stock(N, K, rows)
    cached = lowlat.cached_low_latency(tuner, N, K)
    assert cached[8] == pin
    for rows in (1, 2, 4):  # the unpinned buckets keep the tuner's own choice (split-K wins alone)
        assert cached[rows][3] > 1


@pytest.mark.simulated
def test_a_bucket_cached_before_the_context_is_retuned_over_the_pin(pin, simulated, tuner):
    import flashinfer

    problem = Mxfp8Problem(N, K, 8)
    with flashinfer.autotune(True):
        lowlat.mm(flashinfer, problem)
    before = lowlat.cached_low_latency(tuner, N, K)
    assert before[8] != pin and before[8][3] > 1
    simulated.clear()
    with fi_patches.pinned_tactics(lowlat.table(lowlat.entry(N, K, 5, 8, pin))):
        with flashinfer.autotune(True):
            lowlat.mm(flashinfer, problem)
    assert simulated.rows_profiled() == [8]
    assert simulated.offered(8) == [pin]
    after = lowlat.cached_low_latency(tuner, N, K)
    assert after[8] == pin
    assert {r: t for r, t in after.items() if r != 8} == {r: t for r, t in before.items() if r != 8}


@pytest.mark.simulated
def test_the_tactic_tuned_inside_serves_after_exit(pin, simulated, tuner):
    import flashinfer
    from flashinfer.autotuner import AutoTuner

    problem = Mxfp8Problem(N, K, 6)
    with fi_patches.pinned_tactics(lowlat.table(lowlat.entry(N, K, 5, 8, pin))):
        with flashinfer.autotune(True):
            lowlat.mm(flashinfer, problem)
    runner = lowlat.runner()
    inputs = problem.runner_inputs(lowlat.gemm_base().DEFAULT_WORKSPACE_SIZE)
    chosen_runner, tactic = AutoTuner.get().choose_one(
        "mxfp8_gemm", [runner], lowlat.gemm_base()._MM_MXFP8_CUTE_DSL_TUNING_CONFIG, inputs
    )
    assert tuple(tactic) == pin
    with pytest.raises(Exception) as launch:
        chosen_runner(inputs=inputs, tactic=tactic)
    # The runner validated the tactic against its stock list and failed only at the CPU launch.
    assert "Invalid low-latency GEMM tactic" not in str(launch.value)
    assert "CUDA" in str(launch.value)


def _flashinfer_objects(runner_class: type) -> dict[tuple[str, str], Any]:
    from flashinfer.autotuner import AutoTuner, TunableRunner

    objects: dict[tuple[str, str], Any] = {}
    for name in (
        "flashinfer.gemm.gemm_base",
        "flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm",
        "flashinfer.autotuner.autotuner",
    ):
        for attr, value in vars(importlib.import_module(name)).items():
            objects[(name, attr)] = value
    classes = [TunableRunner, AutoTuner, runner_class]
    for cls in classes:
        for attr, value in vars(cls).items():
            objects[(cls.__qualname__, attr)] = value
    return objects


def _changed(before: dict[tuple[str, str], Any], runner_class: type) -> list[tuple[str, str]]:
    after = _flashinfer_objects(runner_class)
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k, KeyError) is not after.get(k, KeyError))


@pytest.mark.simulated
def test_exit_restores_every_original_object(pin, simulated, tuner):
    import flashinfer

    runner_class = type(lowlat.runner())
    before = _flashinfer_objects(runner_class)
    with fi_patches.pinned_tactics(lowlat.table(lowlat.entry(N, K, 5, 8, pin))):
        changed_inside = _changed(before, runner_class)
        with flashinfer.autotune(True):
            lowlat.mm(flashinfer, Mxfp8Problem(N, K, 8))
    assert ("AutoTuner", "search_cache") in changed_inside
    assert ("TunableRunner", "__init_subclass__") in changed_inside
    assert (runner_class.__qualname__, "get_valid_tactics") in changed_inside
    assert _changed(before, runner_class) == []


def test_an_exception_inside_unwinds_everything(pin):
    runner = lowlat.runner()
    with pytest.raises(RuntimeError, match="boom"):
        with fi_patches.pinned_tactics(lowlat.table(lowlat.entry(N, K, 5, 8, pin))):
            assert lowlat.offered(runner, N, K, 8) == [pin]
            raise RuntimeError("boom")
    assert installed_count() == 0
    assert lowlat.offered(runner, N, K, 8) == lowlat.stock(N, K, 8)


def test_nested_tables_inner_wins_for_its_entries(pinning):
    other_n, other_k = lowlat.OTHER_SHAPE
    outer_pin = lowlat.non_split_alternative(N, K, 8, skip=1)
    inner_pin = lowlat.non_split_alternative(N, K, 8, skip=2)
    inner_small = lowlat.non_split_alternative(N, K, 4, skip=3)
    other_pin = lowlat.non_split_alternative(other_n, other_k, 8, skip=1)
    outer = lowlat.table(
        lowlat.entry(N, K, 5, 8, outer_pin), lowlat.entry(other_n, other_k, 1, 8, other_pin)
    )
    inner = lowlat.table(lowlat.entry(N, K, 5, 8, inner_pin), lowlat.entry(N, K, 3, 4, inner_small))
    runner = lowlat.runner()
    with fi_patches.pinned_tactics(outer):
        assert lowlat.offered(runner, N, K, 8) == [outer_pin]
        assert lowlat.offered(runner, N, K, 4) == lowlat.stock(N, K, 4)
        with fi_patches.pinned_tactics(inner):
            assert lowlat.offered(runner, N, K, 8) == [inner_pin]
            assert lowlat.offered(runner, N, K, 3) == [inner_small]
            assert lowlat.offered(runner, other_n, other_k, 8) == [other_pin]
            with fi_patches.pinned_tactics(outer):  # re-entering a table already active
                assert lowlat.offered(runner, N, K, 8) == [outer_pin]
            assert lowlat.offered(runner, N, K, 8) == [inner_pin]
        assert lowlat.offered(runner, N, K, 8) == [outer_pin]
        assert lowlat.offered(runner, N, K, 4) == lowlat.stock(N, K, 4)
    assert lowlat.offered(runner, N, K, 8) == lowlat.stock(N, K, 8)


def test_eight_threads_each_see_their_own_pins(pinning):
    runner = lowlat.runner()
    stock = lowlat.stock(N, K, 8)
    pins = [t for t in stock[1:] if t[3] == 1][:8]
    assert len(pins) == 8
    start = barrier(9)
    errors: list[str] = []
    rounds = [0] * 8

    def worker(i: int) -> None:
        table = lowlat.table(lowlat.entry(N, K, 5, 8, pins[i]), source=f"<thread {i}>")
        start.wait()
        for round_ in range(25):
            with fi_patches.pinned_tactics(table):
                got = lowlat.offered(runner, N, K, 8)
                if got != [pins[i]]:
                    errors.append(f"thread {i} round {round_}: inside got {got[:2]}")
            got = lowlat.offered(runner, N, K, 8)
            if got != stock:
                errors.append(f"thread {i} round {round_}: outside got {len(got)} tactics")
            rounds[i] += 1

    with workers(start) as pool:  # a worker that raises fails the test
        for i in range(8):
            pool.start(worker, i)
        start.wait()
        for _ in range(50):  # the main thread never entered a context: always stock
            if lowlat.offered(runner, N, K, 8) != stock:
                errors.append("main thread saw pins")
    assert rounds == [25] * 8
    assert errors == []
    assert installed_count() == 0


def test_disabled_feature_yields_does_nothing_and_warns_once(caplog):
    lowlat_pin_table = {
        "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
        "low_latency": [{"n": N, "k": K, "min_rows": 5, "max_rows": 8, "tactic": [128, 8, 1, 1]}],
    }
    from fi_patches.compat import status_of

    record = status_of("pinned_tactics")
    assert not record.enabled  # no FI_PATCHES_DEVICE and no GPU here
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        for _ in range(3):
            with fi_patches.pinned_tactics(lowlat_pin_table) as active:
                assert active is None
                assert installed_count() == 0
    warnings = [r for r in caplog.records if "ignores the [[low_latency]] pins" in r.getMessage()]
    assert len(warnings) == 1
    assert record.reason in warnings[0].getMessage()


def test_a_disabled_block_of_several_sections_logs_one_warning_naming_each(caplog):
    table = {
        "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
        "low_latency": [{"n": N, "k": K, "min_rows": 5, "max_rows": 8, "tactic": [128, 8, 1, 1]}],
        "wide": [{"n": N, "k": K, "tile": 16, "tactic": [128, 8, 1, 1]}],
        "cute_dsl": [
            {"n": N, "k": K, "max_rows": 64, "tactic": [[128, 64], [1, 1], True, False, 1]}
        ],
    }
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        with fi_patches.pinned_tactics(table) as active:
            assert active is None  # no FI_PATCHES_DEVICE and no GPU: every feature is off
    warnings = [r.getMessage() for r in caplog.records if "ignores the" in r.getMessage()]
    assert len(warnings) == 1, warnings
    for section in ("[[low_latency]]", "[[cute_dsl]]", "[[wide]]"):
        assert section in warnings[0]


def test_table_for_another_device_is_skipped_with_the_reason(pin, caplog):
    runner = lowlat.runner()
    table = lowlat.table(lowlat.entry(N, K, 5, 8, pin), device="sm_100")
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        with fi_patches.pinned_tactics(table) as active:
            assert active is None
            assert lowlat.offered(runner, N, K, 8) == lowlat.stock(N, K, 8)
    assert any("chosen on sm_100; this device is sm_103" in r.getMessage() for r in caplog.records)


def test_a_tactic_flashinfer_does_not_offer_is_rejected_before_anything_applies(pinning):
    runner = lowlat.runner()
    offered = set(lowlat.stock(N, K, 8))
    bogus = next(t for t in [(128, 12, 1, 8), (1024, 12, 1, 8), (640, 1, 1, 1)] if t not in offered)
    table = lowlat.table(lowlat.entry(N, K, 5, 8, bogus), source="bogus.toml")
    with pytest.raises(PinTableError) as error, fi_patches.pinned_tactics(table):
        pytest.fail("the body ran with an invalid table")
    message = str(error.value)
    assert "bogus.toml" in message and "[[low_latency]] #1" in message and "tactic" in message
    assert str(list(bogus)) in message
    assert installed_count() == 0
    assert lowlat.offered(runner, N, K, 8) == lowlat.stock(N, K, 8)


def test_a_row_range_splitting_a_tuner_bucket_is_rejected(pin):
    table = lowlat.table(lowlat.entry(N, K, 5, 6, pin), source="split.toml")
    with (
        pytest.raises(
            PinTableError,
            match=r"split\.toml: \[\[low_latency\]\] #1: max_rows = 6: "
            r"rows 5\.\.6 split FlashInfer's tuner bucket of rows 5\.\.8",
        ),
        fi_patches.pinned_tactics(table),
    ):
        pass


def test_default_table_comes_from_register_pins_then_env(pin, tmp_path, monkeypatch):
    runner = lowlat.runner()
    registered = lowlat.table(lowlat.entry(N, K, 5, 8, pin))
    fi_patches.register_pins(registered)
    with fi_patches.pinned_tactics() as active:
        assert active is registered
        assert lowlat.offered(runner, N, K, 8) == [pin]
    env_pin = lowlat.non_split_alternative(N, K, 8, skip=2)
    path = tmp_path / "pins.toml"
    path.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(env_pin)}\n"
    )
    monkeypatch.setenv("FI_PATCHES_PINS", str(path))
    with fi_patches.pinned_tactics():
        assert lowlat.offered(runner, N, K, 8) == [env_pin]
