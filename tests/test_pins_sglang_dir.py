"""``pins record --from <SGLANG_CACHE_DIR>`` and ``pins diff`` on a directory laid out as SGLang
lays it out, with rank files written by FlashInfer's own ``save_configs`` after real tuning runs
of the tests' own op (profiling simulated per rank): the rank files of the installed FlashInfer
and the arch are merged, and the ranks that disagree are named per key."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from fi_patches.cli import main
from fi_patches.pins import PinTable
from fi_patches.tools.record import read_cache
from tests import toy_op

SEEDS = {0: 1, 1: 1, 2: 2}
"""tp rank -> the seed its simulated timings are drawn from: ranks 0 and 1 agree, 2 does not."""


def tune_rank(flashinfer: Any, monkeypatch: pytest.MonkeyPatch, seed: int, path: Path) -> dict:
    """One rank's tuning step as SGLang runs it: tune, then save by hand with FlashInfer's own
    ``save_configs``."""
    from flashinfer.autotuner import AutoTuner

    toy_op.start(monkeypatch, seed)
    with flashinfer.autotune(True):
        toy_op.warm_up()
    path.parent.mkdir(parents=True, exist_ok=True)
    AutoTuner.get().save_configs(str(path))
    return toy_op.chosen()


def key_dir(root: Path, version: str, arch: str, model: str) -> Path:
    sha = hashlib.sha256(model.encode()).hexdigest()[:16]
    return root / "flashinfer" / "autotune" / version / arch / sha


@pytest.fixture
def sglang_cache(engine, monkeypatch, tmp_path) -> tuple[Path, Path, dict[int, dict]]:
    """An SGLANG_CACHE_DIR with one start of 3 TP ranks for this FlashInfer on sm103, and rank
    files of another FlashInfer release and another arch that must not be read."""
    root = tmp_path / "sglang"
    here = key_dir(root, engine.__version__, "sm103", "model|tp3")
    chosen = {
        tp: tune_rank(engine, monkeypatch, seed, here / f"rank_tp{tp}_pp0_dp0.json")
        for tp, seed in SEEDS.items()
    }
    for version, arch in (("0.7.2", "sm103"), (engine.__version__, "sm100")):
        tune_rank(
            engine, monkeypatch, 3, key_dir(root, version, arch, "m") / "rank_tp0_pp0_dp0.json"
        )
    return root, here, chosen


def keys_and_conflicts(chosen: dict[int, dict]) -> tuple[set, set, set]:
    """Every bucket ``(n, rows)`` of the ranks; those on which ranks chose different runners or
    tactics (FlashInfer keeps one winning runner per bucket); those on which some rank differs
    or has no entry."""
    ranks = list(chosen.values())
    keys = set().union(*ranks)
    won = {k: [r[k] for r in ranks if k in r] for k in keys}
    conflicts = {k for k, w in won.items() if len({repr(x) for x in w}) > 1}
    partial = conflicts | {k for k in keys if len(won[k]) < len(ranks)}
    return keys, conflicts, partial


def pinned(table: PinTable, n: int, bucket: int) -> tuple[str, Any]:
    """The one ``(runner, tactic)`` the table pins for a bucket, whichever runner it is."""
    found = [
        (p.runner, p.tactic)
        for p in table.entries("pin")
        if p.shapes.dims[1][1] == n and p.min_rows <= bucket <= p.max_rows
    ]
    assert len(found) == 1, (n, bucket, found)
    return found[0]


@pytest.mark.simulated
def test_record_merges_the_rank_files_and_names_the_ranks_that_disagree(
    sglang_cache, tmp_path, capsys
):
    from fi_patches.pins.keys import as_tactic

    root, here, chosen = sglang_cache
    keys, differ, _ = keys_and_conflicts(chosen)
    assert differ and chosen[0] == chosen[1]  # the divergence the record reports
    out = tmp_path / "pins.toml"
    args = ["pins", "record", "--device", "sm_103", "--from", str(root), "--out", str(out)]
    assert main(args) == 0
    said = capsys.readouterr().out
    total = len(keys)
    assert f"({total - len(differ)} of {total} buckets agree; {len(differ)} disagreed" in said
    lines = [line for line in said.splitlines() if line.startswith("  ")]
    assert len(lines) == len(differ), said
    for line in lines:  # each key: what ranks 0 and 1 chose, what rank 2 chose, the majority
        assert "from rank_tp0_pp0_dp0.json, rank_tp1_pp0_dp0.json;" in line, line
        assert line.rstrip().endswith("(majority)"), line
        assert "from rank_tp2_pp0_dp0.json" in line
    table = PinTable.from_file(out)
    for (n, bucket), (runner, tactic) in chosen[0].items():  # the majority, ranks 0 and 1
        assert pinned(table, n, bucket) == (runner, as_tactic(tactic))
    assert table.meta.source == f"recorded from {here} (3 SGLang rank files)"
    entries, _ = read_cache(here / "rank_tp2_pp0_dp0.json")  # the file is FlashInfer's own form
    assert len(entries) == len(chosen[2])


@pytest.mark.simulated
def test_diff_of_the_directory_compares_its_ranks(sglang_cache, capsys):
    root, _, chosen = sglang_cache
    keys, _, differ = keys_and_conflicts(chosen)
    assert main(["pins", "diff", "--device", "sm_103", str(root)]) == 1
    said = capsys.readouterr().out
    header = said.splitlines()[0].split()
    assert header == ["bucket", *(f"rank_tp{t}_pp0_dp0.json" for t in range(3))]
    assert said.rstrip().endswith(f"{len(differ)} of {len(keys)} buckets differ")


@pytest.mark.simulated
def test_a_directory_without_rank_files_of_this_release_is_named(engine, tmp_path, capsys):
    root = tmp_path / "sglang"
    (key_dir(root, "0.7.2", "sm103", "m")).mkdir(parents=True)
    assert main(["pins", "record", "--device", "sm_103", "--from", str(root)]) == 1
    said = capsys.readouterr().err
    assert f"{root} holds no SGLang rank files of FlashInfer {engine.__version__} on sm_103" in said
    assert "it holds 0.7.2/sm103" in said


@pytest.mark.simulated
def test_two_model_keys_are_refused_with_both_named(sglang_cache, engine, monkeypatch, capsys):
    root, here, _ = sglang_cache
    other = key_dir(root, engine.__version__, "sm103", "another model")
    tune_rank(engine, monkeypatch, 1, other / "rank_tp0_pp0_dp0.json")
    assert main(["pins", "diff", "--device", "sm_103", str(root)]) == 2
    said = capsys.readouterr().err
    assert "holds the rank files of 2 model keys" in said
    assert here.name in said and other.name in said and "pass the directory of one" in said
    # the model key's own directory is read alone
    assert main(["pins", "diff", "--device", "sm_103", str(here)]) == 1
