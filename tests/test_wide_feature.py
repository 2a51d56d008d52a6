"""The ``wide_tile`` feature wired into fi_patches: gating, ``[[wide]]`` pin validation, the
FlashInfer TunableRunner (tuned and pinned like any FlashInfer op) and ``precompile``."""

from __future__ import annotations

import pytest
import torch

import fi_patches
from fi_patches.cli import main
from fi_patches.compat import refresh, status_of
from fi_patches.pins import PinTable, PinTableError
from fi_patches.wide.launch import CUSTOM_OP, wide_runner
from fi_patches.wide.tactics import pick_tile, wide_tactics
from tests.conftest import flashinfer_or_skip, require_feature, require_release_supports
from tests.mxfp8_inputs import Mxfp8Problem

N, K = 7168, 1536


@pytest.fixture
def wide(sm103):
    flashinfer_or_skip()
    require_feature("wide_tile")
    return sm103


def table(*entries, source="<test>") -> PinTable:
    return PinTable.from_mapping(
        {"meta": {"device": "sm_103", "flashinfer": ">=0.7.0"}, "wide": list(entries)},
        source=source,
    )


def pin_entry(tile: int, tactic) -> dict:
    return {"n": N, "k": K, "tile": tile, "tactic": list(tactic)}


def offered(rows: int):
    return wide_runner().get_valid_tactics(Mxfp8Problem(N, K, rows).runner_inputs(), None)


def test_enabled_on_sm103_with_its_self_check(sm103):
    """Not behind the ``wide`` fixture (which needs the feature on): the verdict on sm_103 is
    the one compat/matrix.toml declares for this environment, enabled on a verified release."""
    from tests import expected

    flashinfer_or_skip()
    declared = expected.expectation("wide_tile")
    assert declared is not None, expected.where()
    record = status_of("wide_tile")
    assert declared.match(record.enabled, record.reason), (record.reason, declared.describe())
    if expected.expects_enabled("wide_tile"):
        assert record.enabled and "self-check pass" in record.reason


def test_disabled_on_a_device_it_does_not_support(monkeypatch):
    require_release_supports("wide_tile")
    monkeypatch.setenv("FI_PATCHES_DEVICE", "sm_90")
    refresh()
    record = status_of("wide_tile")
    assert not record.enabled
    assert record.reason == "needs sm_100 or sm_103; this device is sm_90."


def test_the_runner_offers_wide_tactics_only_above_8_and_up_to_48_rows(wide):
    for rows in (1, 8, 49, 64):
        assert offered(rows) == []
    for rows in (9, 16, 17, 40, 48):
        tile = pick_tile(rows)
        assert offered(rows) == [(tile, *t) for t in wide_tactics(N, K, tile)]
    assert (
        wide_runner().get_valid_tactics(Mxfp8Problem(N, K, 16, torch.float16).runner_inputs(), None)
        == []
    )


def test_pinned_tactics_pins_the_wide_runner(wide):
    pin = wide_tactics(N, K, 16)[4]
    with fi_patches.pinned_tactics(table(pin_entry(16, pin))):
        assert offered(12) == [(16, *pin)]
        assert offered(17) == [(32, *t) for t in wide_tactics(N, K, 32)]
        runner, inputs = wide_runner(), Mxfp8Problem(N, K, 12).runner_inputs()
        assert runner.validate_tactic(inputs, (16, *pin))
        # a winner cached before the pin still fits the tile: the engine's tuner-cache wrapper
        # (not the runner) turns it into a miss while tuning
        assert runner.validate_tactic(inputs, (16, *wide_tactics(N, K, 16)[0]))
    assert offered(12) == [(16, *t) for t in wide_tactics(N, K, 16)]
    runner, inputs = wide_runner(), Mxfp8Problem(N, K, 20).runner_inputs()
    assert not runner.validate_tactic(inputs, (16, *pin))  # 20 rows do not fit a 16-row tile


@pytest.mark.simulated
def test_flashinfer_tunes_the_wide_runner_and_serves_the_pin(wide, simulated, tuner):
    import flashinfer
    from flashinfer.autotuner import AutoTuner
    from flashinfer.gemm import gemm_base

    pin, pin16 = wide_tactics(N, K, 32)[2], wide_tactics(N, K, 16)[1]
    config = gemm_base._MM_MXFP8_CUTE_DSL_TUNING_CONFIG
    inputs = Mxfp8Problem(N, K, 32).runner_inputs(gemm_base.DEFAULT_WORKSPACE_SIZE)
    # Both tiles pinned: the runner compiles what it offers before profiling (two kernels).
    pins = table(pin_entry(32, pin), pin_entry(16, pin16))
    with fi_patches.pinned_tactics(pins), flashinfer.autotune(True):
        AutoTuner.get().choose_one(CUSTOM_OP, [wide_runner()], config, inputs)
    assert simulated.offered(32, "WideLowLatencyGemmRunner") == [(32, *pin)]
    assert simulated.offered(16, "WideLowLatencyGemmRunner") == [(16, *pin16)]
    assert simulated.offered(8, "WideLowLatencyGemmRunner") == []
    _, tactic = AutoTuner.get().choose_one(CUSTOM_OP, [wide_runner()], config, inputs)
    assert tuple(tactic) == (32, *pin)


@pytest.mark.simulated
def test_a_lookup_while_tuning_that_names_no_profile_checks_the_pin_on_the_bucket(
    wide, simulated, tuner
):
    """FlashInfer 0.7.0's tuner looks a bucket up by its shapes alone (no profile): a preseed
    block checks the pin on inputs of the bucket's shapes, not on the call's 32 rows, whose
    list (32-row tiles) lacks the 16-row pin."""
    import flashinfer
    from flashinfer.autotuner import AutoTuner
    from flashinfer.gemm import gemm_base

    pin16 = wide_tactics(N, K, 16)[1]
    config = gemm_base._MM_MXFP8_CUTE_DSL_TUNING_CONFIG
    inputs = Mxfp8Problem(N, K, 32).runner_inputs(gemm_base.DEFAULT_WORKSPACE_SIZE)
    bucket = tuple(getattr(x, "shape", (0,)) for x in Mxfp8Problem(N, K, 16).runner_inputs())
    with fi_patches.pinned_tactics(table(pin_entry(16, pin16)), mode="preseed"):
        with flashinfer.autotune(True):
            hit, position, tactic, _ = AutoTuner.get().search_cache(
                CUSTOM_OP, [wide_runner()], bucket, config, inputs=inputs
            )
    assert (hit, position, tuple(tactic)) == (True, 0, (16, *pin16))


@pytest.mark.simulated
def test_a_tuned_wide_cache_records_as_wide_pins(wide, simulated, tuner, tmp_path):
    import flashinfer
    from flashinfer.autotuner import AutoTuner
    from flashinfer.gemm import gemm_base

    from fi_patches.pinning.validate import mxfp8_bucket_of
    from fi_patches.tools.record import read_cache, to_table

    pins = table(pin_entry(16, wide_tactics(N, K, 16)[1]), pin_entry(32, wide_tactics(N, K, 32)[3]))
    config = gemm_base._MM_MXFP8_CUTE_DSL_TUNING_CONFIG
    inputs = Mxfp8Problem(N, K, 32).runner_inputs(gemm_base.DEFAULT_WORKSPACE_SIZE)
    with fi_patches.pinned_tactics(pins), flashinfer.autotune(True):
        AutoTuner.get().choose_one(CUSTOM_OP, [wide_runner()], config, inputs)
    cache = tmp_path / "cache.json"
    AutoTuner.get().save_configs(str(cache))
    entries, _ = read_cache(cache)
    recorded = to_table(
        entries,
        device="sm_103",
        flashinfer_version="0.7.4",
        source="r",
        bucket_of=mxfp8_bucket_of(),
    )
    assert recorded.to_mapping()["wide"] == pins.to_mapping()["wide"]


def test_an_invalid_wide_pin_is_rejected_naming_the_limit(wide):
    big = next(t for t in [(256, 8, 1, 1), (512, 6, 1, 1)] if t not in wide_tactics(N, K, 32))
    with pytest.raises(PinTableError) as error:
        with fi_patches.pinned_tactics(table(pin_entry(32, big), source="wide.toml")):
            pytest.fail("applied")
    message = str(error.value)
    assert "wide.toml: [[wide]] #1: tactic = " in message
    assert "B of shared memory; sm_103 allows 232448 B" in message


def test_precompile_builds_the_pins_and_flags_spills(wide, tmp_path, capsys):
    from fi_patches.tools.wide_resources import compile_with_resources

    good = [wide_tactics(N, K, 16)[0], wide_tactics(N, K, 48)[0]]
    path = tmp_path / "pins.toml"
    path.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        + "".join(
            f"[[wide]]\nn = {N}\nk = {K}\ntile = {tile}\ntactic = {list(t)}\n\n"
            for tile, t in zip((16, 48), good, strict=True)
        )
    )
    assert main(["precompile", "--pins", str(path)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith(f"{N}x{K}")]
    assert len(lines) == 2
    for line, tile, tactic in zip(lines, (16, 48), good, strict=True):
        resources = compile_with_resources(tile, tactic, arch="sm_103a")
        spills = bool(resources.spill_store_bytes or resources.spill_load_bytes)
        assert ("SPILLS" in line) is spills
        assert str(resources.registers) in line.split()


def test_precompile_refuses_a_pin_it_cannot_build(wide, tmp_path, capsys):
    path = tmp_path / "pins.toml"
    path.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[wide]]\nn = {N}\nk = {K}\ntile = 32\ntactic = [256, 12, 1, 1]\n"
    )
    assert main(["precompile", "--pins", str(path)]) == 1
    assert "not built: needs" in capsys.readouterr().out
