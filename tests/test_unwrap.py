"""Every wrapper fi_patches installs on the real FlashInfer unwraps the standard way
(``__wrapped__``, ``inspect.unwrap``) to FlashInfer's exact original, and leaving restores the
originals themselves; wrapt is imported only once a patch is installed."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import fi_patches
from fi_patches.patching import stock_method
from tests import lowlat, toy_op

N, K = lowlat.SHAPE
ROOT = Path(__file__).resolve().parent.parent


def test_every_wrapper_of_a_block_unwraps_to_flashinfers_original(pinning, monkeypatch):
    import flashinfer
    import flashinfer.autotuner as autotuner_package
    from flashinfer.autotuner import AutoTuner

    from fi_patches.internals import tuner as fi_tuner

    monkeypatch.setenv("FI_PATCHES_RANK_GUARD_TUNING", "1")  # the detector's patches too
    tuner_module = fi_tuner.tuner_module()
    runner = lowlat.runner()
    runner_class = type(runner)
    tuner_before = toy_op.tuner_namespace()
    runner_before = dict(vars(runner_class))
    stock_valid = runner_class.get_valid_tactics
    module_names = (fi_tuner.OPERATION_GATE, fi_tuner.CANDIDATE_GATE)
    modules_before = {name: vars(tuner_module)[name] for name in module_names}
    setter_before = vars(autotuner_package)[fi_tuner.SET_GROUP]
    tuner_names = ("search_cache", "choose_one", "_profile_single_kernel", "_prepare_input_tensors")
    pin = lowlat.non_split_alternative(N, K, 8)
    with fi_patches.pinned_tactics(lowlat.table(lowlat.entry(N, K, 5, 8, pin))):
        assert lowlat.offered(runner, N, K, 8) == [pin]  # the wrappers are live
        # choose_one's wrapper acts only while tuning: installed while the tuner's flag is set.
        assert vars(AutoTuner)["choose_one"] is tuner_before["choose_one"]
        with flashinfer.autotune(True):
            installed = {name: vars(AutoTuner)[name] for name in tuner_names}
        assert vars(AutoTuner)["choose_one"] is tuner_before["choose_one"]
        # The flag's watcher: FlashInfer's tuner defines no __setattr__ of its own.
        assert "__setattr__" not in tuner_before
        watcher = vars(AutoTuner)["__setattr__"]
        assert watcher.__wrapped__ is object.__setattr__
        installed.update({name: vars(tuner_module)[name] for name in module_names})
        installed["setter"] = vars(autotuner_package)[fi_tuner.SET_GROUP]
        installed["get_valid_tactics"] = vars(runner_class)["get_valid_tactics"]
        originals = {name: tuner_before[name] for name in tuner_names}
        originals.update(modules_before)
        originals["setter"] = setter_before
        originals["get_valid_tactics"] = stock_valid
        for name, wrapper in installed.items():
            assert wrapper is not originals[name], name  # it is wrapped
            assert wrapper.__wrapped__ is originals[name], name
            assert inspect.unwrap(wrapper) is inspect.unwrap(originals[name]), name
        # Reached through the class and through an instance, as FlashInfer calls them.
        assert inspect.unwrap(AutoTuner.search_cache) is inspect.unwrap(
            tuner_before["search_cache"]
        )
        assert inspect.unwrap(runner_class.get_valid_tactics) is inspect.unwrap(stock_valid)
        assert stock_method(runner_class, "get_valid_tactics") is stock_valid
        # The guard's and the detector's wrappers are wrapt's (off the hot path)...
        import wrapt

        for name in ("_prepare_input_tensors", "setter", *module_names):
            assert isinstance(installed[name], wrapt.FunctionWrapper), name
        # ...the engine's plain functions (hot, and installed by status()'s self-check).
        for name in ("search_cache", "choose_one", "_profile_single_kernel", "get_valid_tactics"):
            assert inspect.isfunction(installed[name]), name
    tuner_after = toy_op.tuner_namespace()
    assert tuner_after.keys() == tuner_before.keys()
    assert all(tuner_after[name] is tuner_before[name] for name in tuner_before)
    runner_after = dict(vars(runner_class))
    assert runner_after.keys() == runner_before.keys()
    assert all(runner_after[name] is runner_before[name] for name in runner_before)
    assert all(vars(tuner_module)[name] is modules_before[name] for name in module_names)
    assert vars(autotuner_package)[fi_tuner.SET_GROUP] is setter_before


def test_stock_method_sees_through_a_wrapper_over_ours_but_not_flashinfers_own(pinning):
    """Someone else's wrapper over ours (``__wrapped__`` chain) is seen through to FlashInfer's
    method; a decorator of the runner's own (its own ``__wrapped__``) is kept."""
    import functools

    from flashinfer.autotuner import TunableRunner

    def inner(self: Any, inputs: Any, profile: Any) -> list[int]:
        return [1, 2, 4]

    @functools.wraps(inner)
    def decorated(self: Any, inputs: Any, profile: Any) -> list[int]:  # the runner's own
        return inner(self, inputs, profile)

    class UnwrapRunner(TunableRunner):
        get_valid_tactics = decorated

        def forward(self, inputs: Any, tactic: Any = -1, **kwargs: Any) -> Any:
            return None

    table = {
        "meta": {"device": "*", "flashinfer": ""},
        "pin": [
            {
                "op": "fi_patches_unwrap_op",
                "runner": "UnwrapRunner",
                "shapes": [["rows", 8]],
                "min_rows": 1,
                "max_rows": 8,
                "tactic": 2,
            }
        ],
    }
    from fi_patches.pins import PinTable

    with fi_patches.pinned_tactics(PinTable.from_mapping(table)):
        ours = vars(UnwrapRunner)["get_valid_tactics"]
        assert ours is not decorated and ours.__wrapped__ is decorated
        assert stock_method(UnwrapRunner, "get_valid_tactics") is decorated

        @functools.wraps(ours)
        def theirs(self: Any, inputs: Any, profile: Any) -> Any:
            return ours(self, inputs, profile)

        UnwrapRunner.get_valid_tactics = theirs
        assert stock_method(UnwrapRunner, "get_valid_tactics") is decorated
        assert inspect.unwrap(theirs) is inner  # the standard way goes all the way down
    # Revert left their wrapper in place (it is not ours); ours inside it passes through.
    assert vars(UnwrapRunner)["get_valid_tactics"] is theirs
    assert UnwrapRunner().get_valid_tactics([], None) == [1, 2, 4]


def _imports_wrapt(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *sys.path])
    env["FI_PATCHES_DEVICE"] = "sm_103"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def test_import_and_status_do_not_import_wrapt_and_a_block_does(pinning):
    code = (
        "import sys, fi_patches\n"
        "assert fi_patches.status()\n"
        "print('wrapt' in sys.modules, 'flashinfer' in sys.modules)\n"
    )
    assert _imports_wrapt(code) == "False True"  # status() evaluated FlashInfer, not wrapt
    pin = lowlat.non_split_alternative(N, K, 8)
    code = (
        "import sys, fi_patches\n"
        "from tests import lowlat\n"
        f"table = lowlat.table(lowlat.entry({N}, {K}, 5, 8, {pin!r}))\n"
        "before = 'wrapt' in sys.modules\n"
        "with fi_patches.pinned_tactics(table):\n"
        "    pass\n"
        "print(before, 'wrapt' in sys.modules)\n"
    )
    assert _imports_wrapt(code) == "False True"  # a block installs the rank guard's wrapper
