"""``pins check``'s report: values as the file spells them, and a warning for a valid entry no
route can use (a ``[[wide]]`` tile the router never picks, computed from the router's own tile
choice)."""

from __future__ import annotations

import pytest

from fi_patches._text import value_text
from fi_patches.cli import main
from fi_patches.mxfp8 import wide_tiles_served
from fi_patches.pins.reading import PinProblem

TABLE = """
[meta]
device = "sm_103"
flashinfer = ">=0.7.0"

[[wide]]
n = 7168
k = 1536
tile = {first}
tactic = [128, 8, 1, 1]

[[wide]]
n = 7168
k = 1536
tile = {second}
tactic = [128, 8, 1, 1]

[[cute_dsl]]
n = 7168
k = 1536
max_rows = 64
tactic = [[128, 64], [1, 1], true, false, 1]
"""


def rows_of(printed: str, entry: str) -> str:
    return next(line for line in printed.splitlines() if line.startswith(entry))


@pytest.mark.parametrize("dead", [8, 24, 64])
def test_a_wide_tile_no_route_reaches_is_a_warning(pinning, tmp_path, capsys, dead):
    served = wide_tiles_served()
    assert dead not in served  # the router's own choice: rows 9..48 round up to 16, 32, 48
    path = tmp_path / "pins.toml"
    path.write_text(TABLE.format(first=16, second=dead))
    code = main(["pins", "check", str(path)])
    printed = capsys.readouterr().out
    assert code in (0, 3)  # a warning is not an error (3: the cute-dsl entry unchecked on CPU)
    live, unreached = rows_of(printed, "[[wide]] #1"), rows_of(printed, "[[wide]] #2")
    assert live.split()[-1] == "OK" and "warning" not in live
    assert " OK " in unreached and f"warning: no route reaches tile {dead}" in unreached
    for tile, rows in served.items():
        assert f"{tile} (rows {rows.start}..{rows.stop - 1})" in unreached


def test_tactics_and_values_read_as_in_the_file(pinning, tmp_path, capsys):
    path = tmp_path / "pins.toml"
    path.write_text(TABLE.format(first=16, second=32))
    main(["pins", "check", str(path)])
    printed = capsys.readouterr().out
    assert "[[128, 64], [1, 1], true, false, 1]" in rows_of(printed, "[[cute_dsl]] #1")
    assert "True" not in printed and "None" not in printed
    bad = tmp_path / "bad.toml"
    bad.write_text(TABLE.format(first=16, second=32).replace("max_rows = 64", "max_rows = true"))
    assert main(["pins", "check", str(bad)]) == 1
    assert "max_rows = true: must be an integer, not bool" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"),
        (True, "true"),
        ("sm_103", '"sm_103"'),
        ([[128, 64], [1, 1], True, False, 1], "[[128, 64], [1, 1], true, false, 1]"),
        ({"a": None}, '{"a": null}'),
        (float("nan"), "nan"),
        (10**400, "<integer of 1329 bits>"),
    ],
)
def test_values_in_messages_are_spelt_as_in_the_file(value, text):
    assert value_text(value) == text
    assert (
        str(PinProblem("f.toml", "[[wide]] #1", "n", value, "bad"))
        == f"f.toml: [[wide]] #1: n = {text}: bad"
    )
