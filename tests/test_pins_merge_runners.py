"""``pins record`` and ``pins diff`` over tuner caches whose winners for one bucket are different
runners, as ranks and restarts of a server give: FlashInfer's real tuner tunes the tests' own op
(two runners, profiling simulated per seed) and writes its own cache files. FlashInfer keeps one
winner per op and bucketed profile, so each bucket is one decision: one disagreement naming what
each cache chose (runner and tactic), one runner for it in the table, and later starts under
that table agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fi_patches
from fi_patches.cli import main
from fi_patches.pins import PinTable
from fi_patches.pins.keys import as_tactic, tactic_text
from tests import toy_op

SEEDS = {"a": 1, "b": 1, "c": 2}
"""Run -> the seed its simulated timings are drawn from: a and b agree, c does not."""

Bucket = tuple[int, int]
"""``(n, rows)``: the weight and row bucket of the tests' op."""


def tune(flashinfer: Any, monkeypatch: pytest.MonkeyPatch, seed: int, path: Path | None) -> dict:
    """One start's warm-up under FlashInfer's tuner (writing its cache file to ``path``); the
    winners ``(n, rows) -> (runner, tactic)``."""
    toy_op.start(monkeypatch, seed)
    with flashinfer.autotune(True, cache=str(path) if path else None):
        toy_op.warm_up()
    return {b: (runner, as_tactic(t)) for b, (runner, t) in toy_op.chosen().items()}


@pytest.fixture
def runs(engine, monkeypatch, tmp_path) -> dict[str, tuple[Path, dict]]:
    found = {}
    for name, seed in SEEDS.items():
        path = tmp_path / f"run_{name}.json"
        found[name] = (path, tune(engine, monkeypatch, seed, path))
    return found


def differing(*chosen: dict) -> tuple[set[Bucket], set[Bucket], set[Bucket]]:
    """Every bucket; those the runs chose differently (runner or tactic); those they chose
    different runners for."""
    buckets = set().union(*chosen)
    differ = {b for b in buckets if len({repr(c.get(b)) for c in chosen}) > 1}
    runners = {b for b in differ if len({c[b][0] for c in chosen if b in c}) > 1}
    return buckets, differ, runners


def label(bucket: Bucket) -> str:
    n, rows = bucket
    return f"{toy_op.OP} [[{rows}, {toy_op.K}], [{toy_op.K}, {n}]]"


def pinned(table: PinTable, bucket: Bucket) -> tuple[str, Any]:
    """The one ``(runner, tactic)`` the table pins for a bucket, whichever runner it is."""
    n, rows = bucket
    found = [
        (p.runner, p.tactic)
        for p in table.entries("pin")
        if p.shapes.dims[1][1] == n and p.min_rows <= rows <= p.max_rows
    ]
    assert len(found) == 1, (bucket, found)
    return found[0]


def record(out: Path, *paths: Path) -> None:
    args = ["pins", "record", "--device", "sm_103", "--out", str(out)]
    assert main([*args, *(a for p in paths for a in ("--from", str(p)))]) == 0


@pytest.mark.simulated
def test_a_bucket_whose_runs_chose_other_runners_is_one_disagreement(runs, tmp_path, capsys):
    (a, chosen_a), (b, chosen_b), (c, chosen_c) = runs.values()
    buckets, differ, runners = differing(chosen_a, chosen_b, chosen_c)
    assert runners and chosen_a == chosen_b  # the seeds give the divergence the record reports
    out = tmp_path / "pins.toml"
    record(out, a, c, b)
    said = capsys.readouterr().out
    agree = len(buckets) - len(differ)
    assert f"({agree} of {len(buckets)} buckets agree; {len(differ)} disagreed" in said
    lines = [line for line in said.splitlines() if line.startswith("  ")]
    assert len(lines) == len(differ), said
    for bucket in runners:  # each cache's runner and tactic, on one line per bucket
        (line,) = [line for line in lines if line.startswith(f"  {label(bucket)}: ")]
        (won, tactic), (odd, odd_tactic) = chosen_a[bucket], chosen_c[bucket]
        assert f"{won} {tactic_text(tactic)} from {a}, {b}" in line, line
        assert f"{odd} {tactic_text(odd_tactic)} from {c}" in line, line
        assert line.endswith(f"-> {won} {tactic_text(tactic)} (majority)"), line
    table = PinTable.from_file(out)  # one runner per bucket: the table loads
    for bucket, won in chosen_a.items():  # the majority, runs a and b
        assert pinned(table, bucket) == won
    assert f"{len(differ)} disagree" in table.meta.note


@pytest.mark.simulated
def test_later_starts_under_the_merged_table_agree(runs, engine, monkeypatch, tmp_path):
    (a, chosen_a), (b, _), (c, chosen_c) = runs.values()
    assert differing(chosen_a, chosen_c)[2]
    out = tmp_path / "pins.toml"
    record(out, a, b, c)
    table = PinTable.from_file(out)
    for seed in (11, 12):  # fresh starts whose own timings disagree
        with fi_patches.pinned_tactics(table):
            later = tune(engine, monkeypatch, seed, None)
        assert later == chosen_a


@pytest.mark.simulated
def test_diff_shows_other_runners_on_the_same_bucket(runs, tmp_path, capsys):
    (a, chosen_a), _, (c, chosen_c) = runs.values()
    buckets, differ, runners = differing(chosen_a, chosen_c)
    assert main(["pins", "diff", str(a), str(c)]) == 1
    said = capsys.readouterr().out
    assert said.rstrip().endswith(f"{len(differ)} of {len(buckets)} buckets differ")
    rows = [line for line in said.splitlines() if line.startswith(toy_op.OP)]
    assert len(rows) == len(differ)
    for bucket in runners:
        (row,) = [r for r in rows if r.startswith(f"{label(bucket)} ")]
        for runner, tactic in (chosen_a[bucket], chosen_c[bucket]):
            assert f"{runner} {tactic_text(tactic)}" in row, row
    # a table recorded from a pins each bucket's runner as a chose it
    table = tmp_path / "a.toml"
    record(table, a)
    capsys.readouterr()
    assert main(["pins", "diff", str(table), str(a)]) == 0
    assert capsys.readouterr().out.strip() == f"0 of {len(buckets)} buckets differ"
    assert main(["pins", "diff", str(table), str(c)]) == 1
    assert f"{len(differ)} of {len(buckets)} buckets differ" in capsys.readouterr().out


@pytest.mark.simulated
def test_a_tie_between_runners_does_not_depend_on_the_order_of_the_caches(runs, tmp_path, capsys):
    (a, chosen_a), _, (c, chosen_c) = runs.values()
    _, _, runners = differing(chosen_a, chosen_c)
    record(tmp_path / "ac.toml", a, c)
    record(tmp_path / "ca.toml", c, a)
    said = capsys.readouterr().out
    ac, ca = PinTable.from_file(tmp_path / "ac.toml"), PinTable.from_file(tmp_path / "ca.toml")
    assert [e.to_mapping() for e in ac.entries("pin")] == [
        e.to_mapping() for e in ca.entries("pin")
    ]
    for bucket in runners:  # one vote each: the runner whose name sorts first
        won = min(chosen_a[bucket], chosen_c[bucket], key=lambda w: w[0])
        assert pinned(ac, bucket) == won
        assert f"-> {won[0]} {tactic_text(won[1])} (text order)" in said


# --- runners tuned apart: the op called per backend ---------------------------------------------


def tune_apart(
    flashinfer: Any, monkeypatch: pytest.MonkeyPatch, seed: int, path: Path | None
) -> dict[tuple[int, int, str], Any]:
    """One start of a server that calls the op per ``backend`` (as ``mm_bf16(backend=...)`` is
    called): each runner is tuned on its own, and FlashInfer's cache keeps a winner of each for
    every bucket. The winners ``(n, rows, runner) -> tactic``."""
    toy_op.start(monkeypatch, seed)
    with flashinfer.autotune(True, cache=str(path) if path else None):
        toy_op.warm_up(backend=0)
        toy_op.warm_up(backend=1)
    return {k: as_tactic(t) for k, t in toy_op.winners().items()}


@pytest.mark.simulated
def test_runners_tuned_apart_keep_their_own_buckets(engine, monkeypatch, tmp_path, capsys):
    paths = {name: tmp_path / f"apart_{name}.json" for name in SEEDS}
    won = {name: tune_apart(engine, monkeypatch, SEEDS[name], paths[name]) for name in SEEDS}
    assert {runner for _, _, runner in won["a"]} == {"ToyTileRunner", "ToySplitRunner"}
    differ = {k for k in won["a"] if won["a"][k] != won["c"][k]}
    assert differ and won["a"] == won["b"]
    out = tmp_path / "pins.toml"
    record(out, *paths.values())
    said = capsys.readouterr().out
    total = len(won["a"])  # each runner's buckets, voted on apart
    assert f"({total - len(differ)} of {total} buckets agree; {len(differ)} disagreed" in said
    lines = [line for line in said.splitlines() if line.startswith("  ")]
    assert len(lines) == len(differ)
    for n, rows, runner in differ:  # labelled by the runner's lane, with the tactics alone
        (line,) = [x for x in lines if x.startswith(f"  {label((n, rows))} {runner}: ")]
        assert line.endswith(f"-> {tactic_text(won['a'][(n, rows, runner)])} (majority)"), line
    table = PinTable.from_file(out)  # both runners pinned for every bucket
    for (n, rows, runner), tactic in won["a"].items():
        found = [
            p.tactic
            for p in table.entries("pin")
            if p.runner == runner and p.shapes.dims[1][1] == n and p.min_rows <= rows <= p.max_rows
        ]
        assert found == [tactic], (n, rows, runner, found)
    for seed in (11, 12):  # later starts, per backend as before: each runner serves its pin
        with fi_patches.pinned_tactics(table):
            assert tune_apart(engine, monkeypatch, seed, None) == won["a"]
    # pins diff compares each runner's buckets on its own, caches or tables alike
    capsys.readouterr()
    assert main(["pins", "diff", str(paths["a"]), str(paths["c"])]) == 1
    assert capsys.readouterr().out.rstrip().endswith(f"{len(differ)} of {total} buckets differ")
    tables = [tmp_path / "a.toml", tmp_path / "c.toml"]
    record(tables[0], paths["a"])
    record(tables[1], paths["c"])
    capsys.readouterr()
    assert main(["pins", "diff", *map(str, tables)]) == 1
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith(toy_op.OP)]
    assert {r.split("]] ")[1].split()[0] for r in rows} == {runner for _, _, runner in differ}
