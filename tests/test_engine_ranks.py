"""The engine across ranks: real processes on gloo (CPU), each tuning the tests' own op through
FlashInfer's real tuner under FlashInfer's own tune group (``set_autotune_process_group``),
with profiling simulated and timed differently per rank, as ranks' timings differ on GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_release_supports
from tests.process_group import run_group

BODY = """
import pytest, flashinfer
import flashinfer.autotuner as autotuner
import fi_patches
from tests import toy_op
mode = {mode!r}
monkeypatch = pytest.MonkeyPatch()
profiling = toy_op.start(monkeypatch, seed=100 + RANK)
lock = {lock!r}
if mode == "other" and RANK == 1:
    lock = {other!r}
result = {{}}
try:
    if mode == "stock":
        autotuner.set_autotune_process_group(dist.group.WORLD)
        with flashinfer.autotune(True):
            toy_op.warm_up((1, 2, 4, 8))
    else:
        with fi_patches.pinned_tactics(lock):
            autotuner.set_autotune_process_group(dist.group.WORLD)
            with flashinfer.autotune(True):
                toy_op.warm_up((1, 2, 4, 8))
    result["chosen"] = sorted([list(k), v[0], repr(v[1])] for k, v in toy_op.chosen().items())
    per_key = {{}}
    for runner, rows, tactic in profiling.timed:
        per_key[rows] = per_key.get(rows, 0) + 1
    result["timed"] = len(profiling.timed)
except Exception as exc:
    result["raised"] = type(exc).__name__
    result["message"] = str(exc)
finally:
    autotuner.set_autotune_process_group(None)
report(result)
"""


def _lockfile(path: Path, tactic: int) -> str:
    """A lockfile pinning the toy op's split runner to ``tactic`` for every key the ranks tune."""
    from fi_patches.pins import PinTable
    from fi_patches.tools.record import dumps

    entries = [
        {
            "op": "fi_patches_toy_gemm",
            "runner": "ToySplitRunner",
            "shapes": [["rows", 64], [64, n]],
            "min_rows": 1,
            "max_rows": 8,
            "tactic": tactic,
        }
        for n in (32, 48)
    ]
    table = PinTable.from_mapping({"meta": {"device": "*", "flashinfer": ""}, "pin": entries})
    path.write_text(dumps(table.to_mapping()))
    return str(path)


@pytest.fixture
def ranks(sm103: str) -> int:
    require_release_supports("pinned_ops")  # the ranks tune under pinned_tactics()
    return 2


def _run(tmp_path: Path, mode: str, lock: str = "", other: str = "") -> list:
    body = BODY.format(mode=mode, lock=lock, other=other)
    tmp_path.mkdir(parents=True, exist_ok=True)
    return [o.result for o in run_group(body, 2, tmp_path, limit=240)]


def test_stock_ranks_tune_apart_and_a_lockfile_makes_them_agree(ranks, tmp_path):
    stock = _run(tmp_path / "stock", "stock")
    assert all("chosen" in r for r in stock), stock
    differ = [a for a, b in zip(stock[0]["chosen"], stock[1]["chosen"], strict=True) if a != b]
    lock = _lockfile(tmp_path / "lock.toml", 2)
    pinned = _run(tmp_path / "pinned", "pinned", lock)
    assert all("chosen" in r for r in pinned), pinned
    assert pinned[0]["chosen"] == pinned[1]["chosen"]  # 0 differing keys
    assert {c[1] for c in pinned[0]["chosen"]} == {"ToySplitRunner"}
    assert {c[2] for c in pinned[0]["chosen"]} == {"2"}
    assert all(r["timed"] == 2 * 4 for r in pinned)  # one tactic per pinned key, on each rank
    assert differ, "the ranks' simulated timings were meant to split some stock picks"


def test_a_lockfile_that_differs_between_ranks_is_caught_before_flashinfer_reduces(ranks, tmp_path):
    """FlashInfer's setter, looked up when called (as docs/ranks.md says the guard needs), runs
    fi_patches' rank guard first: every rank raises one message naming the field, instead of
    FlashInfer's plan mismatch at its first reduce."""
    lock = _lockfile(tmp_path / "lock.toml", 2)
    other = _lockfile(tmp_path / "other.toml", 4)
    found = _run(tmp_path / "run", "other", lock, other)
    assert [r.get("raised") for r in found] == ["RankMismatchError", "RankMismatchError"], found
    assert found[0]["message"] == found[1]["message"]
    assert "pins.active.sha256" in found[0]["message"]
