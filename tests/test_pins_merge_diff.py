"""``pins record`` over several tuner caches (one per rank, or several restarts) and ``pins
diff``, on real cache files written by FlashInfer's own ``save_configs`` after real tuning runs
(tests/simulation.py stands in for the device); plus the record command's error messages."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import fi_patches
from fi_patches.cli import main
from fi_patches.pins import PinTable
from tests import lowlat
from tests.mxfp8_inputs import Mxfp8Problem

N, K = lowlat.SHAPE
ROWS = (1, 2, 4, 8)  # one tuning call per bucket of the low-latency runner


def tune_and_save(tuner, path: Path, table: PinTable | None = None) -> Path:
    """Tune every low-latency bucket (over the pin where ``table`` pins one) and save the
    tuner's cache with FlashInfer's own ``save_configs``."""
    import flashinfer

    tuner.clear_cache()
    with fi_patches.pinned_tactics(table) if table is not None else _nothing():
        with flashinfer.autotune(True):
            for rows in ROWS:
                with pytest.raises(Exception, match="CUDA"):
                    flashinfer.mm_mxfp8(
                        *Mxfp8Problem(N, K, rows).mm_args(),
                        out_dtype=torch.bfloat16,
                        backend="cutedsl_low_latency",
                    )
    tuner.save_configs(str(path))
    return path


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def caches(simulated, tuner, tmp_path):
    """Three runs: two stock tunes (the simulated timing makes a split-K tactic win bucket 8)
    and one that tuned bucket 8 over another tactic, as a restart or rank that chose otherwise."""
    stock_a = tune_and_save(tuner, tmp_path / "run_a.json")
    stock_b = tune_and_save(tuner, tmp_path / "run_b.json")
    other = lowlat.non_split_alternative(N, K, 8)
    pinned = lowlat.table(lowlat.entry(N, K, 5, 8, other))
    odd = tune_and_save(tuner, tmp_path / "run_c.json", pinned)
    won = lowlat.cached_low_latency(tuner, N, K)
    assert won[8] == other
    return stock_a, stock_b, odd, other


def low_latency_rows(table: PinTable) -> dict[int, tuple[int, ...] | None]:
    """The pinned tactic at each row count the low-latency runner serves."""
    return {rows: table.low_latency_tactic(N, K, rows) for rows in range(1, 9)}


@pytest.mark.simulated
def test_record_merges_by_majority_and_records_the_disagreement(caches, tmp_path, capsys):
    stock_a, stock_b, odd, other = caches
    out = tmp_path / "merged.toml"
    args = ["pins", "record", "--device", "sm_103", "--out", str(out)]
    assert main([*args, "--from", str(stock_a), "--from", str(odd), "--from", str(stock_b)]) == 0
    said = capsys.readouterr().out
    assert "3 of 4 buckets agree; 1 disagreed" in said
    merged = PinTable.from_file(out)
    single = tmp_path / "single.toml"
    assert (
        main(["pins", "record", "--device", "sm_103", "--from", str(stock_a), "--out", str(single)])
        == 0
    )
    # the majority (two stock runs) wins bucket 8; every other bucket agreed
    assert low_latency_rows(merged) == low_latency_rows(PinTable.from_file(single))
    assert other not in low_latency_rows(merged).values()
    note = merged.meta.note
    assert note.startswith(
        "merged 3 tuner caches: 3 of 4 buckets agree; 1 disagree, decided 1 by majority:\n"
    )
    assert "3 of 4 buckets agree; 1 disagreed, decided 1 by majority (see [meta] note)" in said
    assert f"low_latency {N}x{K} rows 5..8" in note and "(majority)" in note
    assert f"{list(other)}".replace(" ", "") in note and str(odd) in note
    assert merged.meta.source == f"recorded from {stock_a}, {odd}, {stock_b}"
    # the order of --from does not change the table
    again = tmp_path / "again.toml"
    assert (
        main(
            [
                *args[:-1],
                str(again),
                "--from",
                str(odd),
                "--from",
                str(stock_b),
                "--from",
                str(stock_a),
            ]
        )
        == 0
    )
    assert low_latency_rows(PinTable.from_file(again)) == low_latency_rows(merged)


@pytest.mark.simulated
def test_a_tie_goes_to_flashinfers_enumerator_order(caches, tmp_path, capsys):
    stock_a, _, odd, other = caches
    split = low_latency_rows(PinTable.from_file(_record(stock_a, tmp_path / "a.toml")))[8]
    assert split is not None and split != other
    order = lowlat.stock(N, K, 8)
    first = min((split, other), key=order.index)
    out = tmp_path / "tie.toml"
    assert (
        main(
            [
                "pins",
                "record",
                "--device",
                "sm_103",
                "--from",
                str(stock_a),
                "--from",
                str(odd),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    tie = PinTable.from_file(out)
    assert low_latency_rows(tie)[8] == first
    # no bucket had a majority: the summary counts what each rule decided, and the note has
    # one line per disagreement, each cache named as given on the command line
    said = capsys.readouterr().out
    assert "1 disagreed, decided 1 by enumerator order (see [meta] note)" in said
    assert "majority" not in said
    lines = tie.meta.note.splitlines()
    assert lines[0] == (
        "merged 2 tuner caches: 3 of 4 buckets agree; 1 disagree, decided 1 by enumerator order:"
    )
    assert len(lines) == 2 and lines[1].startswith(f"low_latency {N}x{K} rows 5..8: ")
    assert lines[1].endswith("(enumerator order)") and str(odd) in lines[1]
    assert '"""' in out.read_text()  # a TOML multi-line string, read back as written


def _record(cache: Path, out: Path) -> Path:
    assert (
        main(["pins", "record", "--device", "sm_103", "--from", str(cache), "--out", str(out)]) == 0
    )
    return out


@pytest.mark.simulated
def test_diff_reports_each_differing_bucket_and_exits_one(caches, tmp_path, capsys):
    stock_a, stock_b, odd, other = caches
    capsys.readouterr()
    assert main(["pins", "diff", str(stock_a), str(odd)]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("low_latency")]
    assert len(lines) == 1 and lines[0].startswith(f"low_latency {N}x{K} rows 5..8")
    assert "[" + ",".join(map(str, other)) + "]" in lines[0]
    assert out.rstrip().endswith("1 of 4 buckets differ")

    assert main(["pins", "diff", str(stock_a), str(stock_b)]) == 0
    assert capsys.readouterr().out.strip() == "0 of 4 buckets differ"

    # a table recorded from a cache pins what the cache chose, bucket for bucket
    table = _record(stock_a, tmp_path / "a.toml")
    capsys.readouterr()
    assert main(["pins", "diff", str(table), str(stock_a), str(stock_b)]) == 0
    assert "0 of 4 buckets differ" in capsys.readouterr().out
    assert main(["pins", "diff", str(table), str(odd)]) == 1
    assert "1 of 4 buckets differ" in capsys.readouterr().out


def test_diff_rows_come_in_numeric_order(pinning, tmp_path, capsys):
    """Tiles 8..128 as numbers, not as text (which put 128 and 16 before 8)."""
    tiles = (128, 16, 8, 24, 64, 32)
    tables = []
    for name, tactic in (("a", [128, 8, 1, 1]), ("b", [256, 4, 1, 1])):
        path = tmp_path / f"{name}.toml"
        text = '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7"\n'
        for tile in tiles:
            text += f"\n[[wide]]\nn = {N}\nk = {K}\ntile = {tile}\ntactic = {tactic}\n"
        path.write_text(text)
        tables.append(str(path))
    assert main(["pins", "diff", *tables]) == 1
    rows = [line.split()[3] for line in capsys.readouterr().out.splitlines() if "tile" in line]
    assert rows == [str(t) for t in sorted(tiles)]


def test_diff_of_an_unreadable_input_exits_two(pinning, tmp_path, capsys):
    assert main(["pins", "diff", str(tmp_path / "missing.json"), str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert f"the tuner cache {tmp_path / 'missing.json'}: file: cannot be read" in err


# --- messages of pins record (issue 14) --------------------------------------------------


def test_record_of_a_missing_cache_names_the_file_not_a_pin_table(pinning, tmp_path, capsys):
    missing = tmp_path / "autotune_configs.json"
    assert main(["pins", "record", "--device", "sm_103", "--from", str(missing)]) == 1
    err = capsys.readouterr().err
    assert f"the tuner cache {missing}: file: cannot be read (No such file or directory)" in err
    assert "pin table" not in err


def test_record_refuses_a_device_that_is_not_an_arch(pinning, tmp_path, capsys):
    assert main(["pins", "record", "--device", "h100", "--from", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert "--device 'h100' is not an arch" in err and "sm_103" in err
    assert "say which device" not in err


def test_record_of_an_empty_cache_exits_one_and_writes_nothing(tuner, tmp_path, capsys):
    empty = tmp_path / "empty.json"
    tuner.save_configs(str(empty))  # FlashInfer's own file for a cache with no entries
    assert empty.is_file()
    out = tmp_path / "pins.toml"
    assert (
        main(["pins", "record", "--device", "sm_103", "--from", str(empty), "--out", str(out)]) == 1
    )
    assert "holds no tuned entry" in capsys.readouterr().err
    assert not out.exists()


def test_record_refuses_caches_of_different_flashinfer_releases(caches, tmp_path, capsys):
    import json

    stock_a, _, odd, _ = caches
    older = tmp_path / "older.json"
    data = json.loads(odd.read_text())
    recorded = json.loads(stock_a.read_text())["_metadata"]["flashinfer_version"]
    other = "0.7.2" if recorded == "0.7.1" else "0.7.1"  # another release than the cells'
    data["_metadata"]["flashinfer_version"] = other
    older.write_text(json.dumps(data))
    shutil.copy(stock_a, tmp_path / "a.json")
    assert (
        main(["pins", "record", "--device", "sm_103", "--from", str(stock_a), "--from", str(older)])
        == 1
    )
    err = capsys.readouterr().err
    assert "different FlashInfer releases" in err and other in err and recorded in err
