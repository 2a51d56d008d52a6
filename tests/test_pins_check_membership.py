"""``pins check`` on ``[[pin]]`` entries: where a runner of the entry's class is live in the
process (or can be made with no arguments) and lists the key's tactics, membership is checked
for real, OK or invalid; elsewhere each entry is unchecked with its own reason, naming its
runner and why its list cannot be had here. The runners are FlashInfer's real
``TunableRunner`` subclasses: the tests' toy op, runners of the test's own, and FlashInfer's
factory-built ``TGVGemmRunner``."""

from __future__ import annotations

from typing import Any

import pytest

from fi_patches.cli import main
from fi_patches.pins import PinTable
from fi_patches.tools.check import INVALID, OK, UNCHECKED, check_entries, pins_per_op
from tests import toy_op
from tests.conftest import require_release_supports


@pytest.fixture
def lockfile_checks(sm103: str) -> None:
    require_release_supports("pinned_ops")


def _table(*pins: dict[str, Any]) -> PinTable:
    return PinTable.from_mapping(
        {"meta": {"device": "*", "flashinfer": ""}, "pin": list(pins)}, source="lock.toml"
    )


def _pin(runner: str, tactic: Any, n: int = 32, **fields: Any) -> dict[str, Any]:
    shapes = [["rows", toy_op.K], [toy_op.K, n]]
    entry = {"op": toy_op.OP, "runner": runner, "shapes": shapes, "max_rows": 64, "tactic": tactic}
    return {**entry, **fields}


def _states(table: PinTable) -> list[tuple[str, str]]:
    _, results = check_entries(table)
    return [(r.state, r.reason) for r in results]


def test_a_live_runner_s_list_decides_ok_or_invalid(lockfile_checks):
    toy_op.runners()  # as after the model ran in this process
    table = _table(
        _pin("ToySplitRunner", 2),
        _pin("ToySplitRunner", 3, n=48),
        _pin("ToyTileRunner", [8, 2], max_rows=8, extras="(torch.float32,)"),
        _pin("ToyTileRunner", [8, 2], min_rows=16, max_rows=32, extras="(torch.float32,)"),
    )
    [split_ok, split_bad, tile_ok, tile_bad] = _states(table)
    assert split_ok == (
        OK,
        "tactic 2 is among the tactics a live ToySplitRunner offers for rows 1, 2, 4, 8, 16, 32, 64",
    )
    assert split_bad == (
        INVALID,
        "tactic = 3: is not among the 3 tactics a live ToySplitRunner offers for rows 1 "
        "(e.g. 1, 2, 4)",
    )
    assert tile_ok[0] == OK and "rows 1, 2, 4, 8" in tile_ok[1]
    assert tile_bad == (
        INVALID,
        "tactic = [8, 2]: is not among the 4 tactics a live ToyTileRunner offers for rows 16 "
        "(e.g. [16,2], [16,3], [32,2])",
    )
    [ops] = pins_per_op(table)
    assert (ops.entries, ops.applied, ops.invalid, ops.unchecked) == (4, 2, 2, 0)


def test_pins_check_exits_one_on_an_invalid_tactic_and_zero_when_all_are_members(
    lockfile_checks, tmp_path, capsys
):
    toy_op.runners()
    path = tmp_path / "lock.toml"
    path.write_text(
        "[meta]\ndevice = '*'\nflashinfer = ''\n"
        f"[[pin]]\nop = '{toy_op.OP}'\nrunner = 'ToySplitRunner'\n"
        f"shapes = [['rows', {toy_op.K}], [{toy_op.K}, 32]]\nmax_rows = 8\ntactic = 4\n"
    )
    assert main(["pins", "check", str(path)]) == 0
    assert " OK " in capsys.readouterr().out
    path.write_text(path.read_text().replace("tactic = 4", "tactic = 5"))
    assert main(["pins", "check", str(path)]) == 1
    assert "tactic = 5: is not among the 3 tactics a live ToySplitRunner" in capsys.readouterr().out


def _own_runner_classes() -> tuple[type, type, type]:
    from flashinfer.autotuner import TunableRunner

    class CheckMadeRunner(TunableRunner):
        def get_valid_tactics(self, inputs: Any, profile: Any = None) -> list[Any]:
            return [[1, 2], [3, 4]]

        def forward(self, inputs: Any, tactic: Any = -1, **kw: Any) -> Any:
            return inputs[0]

    class NeedsArgumentsRunner(CheckMadeRunner):
        def __init__(self, sm_version: int, enable_pdl: bool) -> None:
            self.sm_version = sm_version

    class NeedsTheDeviceRunner(CheckMadeRunner):
        def get_valid_tactics(self, inputs: Any, profile: Any = None) -> list[Any]:
            raise RuntimeError("Found no NVIDIA driver on your system")

    return CheckMadeRunner, NeedsArgumentsRunner, NeedsTheDeviceRunner


_OWN: list[Any] = []


def _flashinfer_module_level_pin() -> dict[str, Any]:
    """A ``[[pin]]`` of a runner class FlashInfer defines at module level, loaded in this
    process with no instance alive (0.7.4's CakeStepFunRunner; older releases lack it)."""
    import gc

    from fi_patches.internals import tuner as fi_tuner
    from fi_patches.internals.catalog import catalog
    from fi_patches.patching import all_subclasses

    found = catalog()
    if found is not None and "CakeStepFunRunner" in found.defined:
        return {**_pin("CakeStepFunRunner", 1), "op": "moe_cake_step_fun"}
    live = {type(o).__name__ for o in gc.get_objects() if isinstance(o, fi_tuner.tunable_runner())}
    for cls in all_subclasses(fi_tuner.tunable_runner()):
        defined = found.defined.get(cls.__name__) if found is not None else None
        if defined is not None and not defined.nested and cls.__name__ not in live:
            return {**_pin(cls.__name__, 1), "op": "bf16_tgv_gemm"}  # an op every release tunes
    pytest.skip("no module-level runner class of FlashInfer's is loaded here without instances")


def test_each_entry_says_why_its_runner_cannot_list_here(lockfile_checks):
    if not _OWN:
        made, needs_args, needs_device = _own_runner_classes()
        _OWN.extend([made, needs_args, needs_device, needs_device()])  # the last one live
    table = _table(
        _pin("CheckMadeRunner", [3, 4]),
        _pin("CheckMadeRunner", [3, 5], n=48),
        _pin("NeedsArgumentsRunner", [1, 2]),
        _pin("NeedsTheDeviceRunner", [1, 2]),
        _pin("ToySplitRunner", 1, extras="(torch.bfloat16,)"),
        _pin("ToySplitRunner", 1, shapes=[["rows", "*"], [toy_op.K, 48]]),
        {**_pin("TGVGemmRunner", 3), "op": "bf16_tgv_gemm"},
        _flashinfer_module_level_pin(),
    )
    toy_op.runners()
    states = _states(table)
    assert states[0] == (
        OK,
        "tactic [3,4] is among the tactics CheckMadeRunner() made by check offers for rows 1, "
        "2, 4, 8, 16, 32, 64",
    )
    assert states[1][0] == INVALID
    assert "tactics CheckMadeRunner() made by check offers for rows 1" in states[1][1]
    reasons = [reason for state, reason in states[2:] if state == UNCHECKED]
    assert len(reasons) == 6, states
    assert reasons[0].startswith(
        "no NeedsArgumentsRunner is live in this process and check makes none (its constructor "
        "needs sm_version, enable_pdl); whether tactic [1,2] is in NeedsArgumentsRunner's own "
        "list for this key is checked when the tuner first lists it"
    )
    assert reasons[1].startswith(
        "a live NeedsTheDeviceRunner could not list its tactics here (for rows 1: RuntimeError: "
        "Found no NVIDIA driver on your system); whether tactic [1,2] is in NeedsTheDeviceRunner"
    )
    assert reasons[2].startswith(
        "a live ToySplitRunner gives the float32 inputs check builds for rows 1 the extras (), "
        "not the entry's (torch.bfloat16,), so its list for this key cannot be had here"
    )
    assert reasons[3].startswith(
        "its shapes hold a dimension FlashInfer's tuner constrains (-1) or any value matches "
        '("*"), so check cannot build the inputs of its keys for a live ToySplitRunner'
    )
    assert reasons[4].startswith(
        "FlashInfer builds TGVGemmRunner inside a factory function (flashinfer/gemm/gemm_base.py), "
        "so none exists until its op runs in this process, and check makes no runner; whether "
        "tactic 3 is in TGVGemmRunner's own list"
    )
    name = table.entries("pin")[-1].runner
    assert reasons[5].startswith(  # a module-level class of FlashInfer's
        f"no {name} is live in this process, and check makes none of FlashInfer's own "
        f"runners (making one may load or build its kernels); whether tactic 1 is in"
    )


def test_the_command_line_names_the_factory_for_each_entry(lockfile_checks, tmp_path, capsys):
    path = tmp_path / "lock.toml"
    path.write_text(
        "[meta]\ndevice = '*'\nflashinfer = ''\n"
        "[[pin]]\nop = 'bf16_tgv_gemm'\nrunner = 'TGVGemmRunner'\n"
        "shapes = [['rows', 4096], [4096, 7168]]\nmax_rows = 16\ntactic = 3\n"
        "[[pin]]\nop = 'bf16_gemm'\nrunner = 'CublasltBf16GemmRunner'\n"
        "shapes = [['rows', 4096], [4096, 7168]]\nmax_rows = 16\ntactic = 1\n"
    )
    assert main(["pins", "check", str(path)]) == 3
    lines = capsys.readouterr().out.splitlines()
    [tgv] = [line for line in lines if line.startswith("[[pin]] #1")]
    [cublas] = [line for line in lines if line.startswith("[[pin]] #2")]
    assert " unchecked  FlashInfer builds TGVGemmRunner inside a factory function" in tgv
    assert "whether tactic 3 is in TGVGemmRunner's own list" in tgv
    assert " unchecked  FlashInfer builds CublasltBf16GemmRunner inside a factory" in cublas
    assert "whether tactic 1 is in CublasltBf16GemmRunner's own list" in cublas
