"""Hostile pin tables, one defect class at a time: explicit nulls, misspelt fields, values that
cannot be printed, numbers past every bound, and files that are not pin files. Each is refused
whole with a ``PinTableError`` naming the file, the entry and the field; nothing else escapes."""

from __future__ import annotations

import os
import random
import sys

import pytest

from fi_patches._text import safe_repr
from fi_patches.pins import PinTable, PinTableError
from fi_patches.pins.reading import MAX_FILE_BYTES, MAX_SHOWN_PROBLEMS, PinProblem
from fi_patches.pins.schema import K_MAX, MAX_ENTRIES, N_MAX, ROWS_MAX

META = {"device": "sm_103", "flashinfer": ">=0.7.0,<0.8"}
LOW = {"n": 7168, "k": 1536, "min_rows": 5, "max_rows": 8, "tactic": [128, 8, 1, 1]}
CUTE = {"n": 7168, "k": 1536, "max_rows": 64, "tactic": [[128, 64], [1, 1], True, False, 1]}


def problems(data, source="pins.json"):
    with pytest.raises(PinTableError) as error:
        PinTable.from_mapping(data, source=source)
    return [str(p) for p in error.value.problems]


def file_problems(path):
    with pytest.raises(PinTableError) as error:
        PinTable.from_file(path)
    found = [str(p) for p in error.value.problems]
    assert all(p.startswith(f"{path}: ") for p in found), found
    return found


# --- explicit nulls are wrong values, never "absent" ----------------------------------------


@pytest.mark.parametrize("field", ["device", "flashinfer", "note", "source", "schema"])
def test_a_null_in_meta_is_a_problem_of_that_field(field):
    found = problems({"meta": {**META, field: None}})
    expected = "an integer" if field == "schema" else "a string"
    assert found == [f"pins.json: [meta]: {field} = null: must be {expected}, not null"]


@pytest.mark.parametrize("field", ["n", "k", "min_rows", "max_rows", "tactic"])
def test_a_null_in_an_entry_refuses_the_table(field):
    found = problems({"meta": META, "low_latency": [LOW, {**LOW, "n": 1536, field: None}]})
    assert len(found) == 1
    assert found[0].startswith(f"pins.json: [[low_latency]] #2: {field} = null: must be")
    assert found[0].endswith("not null")


def test_null_sections_entries_and_cute_dsl_fields_are_problems():
    assert problems({"meta": META, "cute_dsl": None}) == [
        "pins.json: [[cute_dsl]]: must be an array of tables, not null"
    ]
    assert problems({"meta": META, "wide": [None]}) == [
        "pins.json: [[wide]] #1: must be a table, not null"
    ]
    (found,) = problems({"meta": META, "cute_dsl": [{**CUTE, "tactic": None}]})
    assert found.startswith("pins.json: [[cute_dsl]] #1: tactic = null: must be [[mma_m, mma_n]")
    assert problems({"meta": None}) == ["pins.json: [meta]: must be a table, not null"]


# --- unknown fields: once, with a did-you-mean, never a placeholder (issue 14) -----------------


def test_a_misspelt_required_field_is_one_problem_with_a_suggestion():
    typo = {key: value for key, value in LOW.items() if key != "max_rows"} | {"max_row": 8}
    assert problems({"meta": META, "low_latency": [typo]}) == [
        "pins.json: [[low_latency]] #1: max_row = 8: is not a known field; did you mean max_rows?"
    ]


def test_a_misspelt_optional_field_and_a_stranger_are_reported_once_each():
    found = problems({"meta": {**META, "devise": "sm_103"}, "low_latency": [{**LOW, "colour": 1}]})
    assert 'pins.json: [meta]: devise = "sm_103": is not a known field; did you mean device?' in (
        found
    )
    assert any(
        p.startswith(
            "pins.json: [[low_latency]] #1: colour = 1: is not a known field (known: k, max_rows"
        )
        for p in found
    )
    assert len(found) == 2, found
    assert not any("object object" in p or "required" in p.split(": ", 3)[-1] for p in found)


def test_a_misspelt_section_gets_a_suggestion():
    assert problems({"meta": META, "cute_dls": []}) == [
        "pins.json: top level: cute_dls: is not a known section; did you mean cute_dsl?"
    ]


def test_the_cli_reports_a_misspelt_field_once(tmp_path, capsys):
    from fi_patches.cli import main

    path = tmp_path / "pins.toml"
    path.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7"\n\n'
        "[[low_latency]]\nn = 7168\nk = 1536\nmax_row = 8\ntactic = [128, 8, 1, 1]\n"
    )
    assert main(["pins", "check", str(path)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"pins check: invalid pin table: {path}: [[low_latency]] #1: max_row = 8: is not a known "
        "field; did you mean max_rows?"
    ]


# --- bounds, checked before FlashInfer is asked ----------------------------------------------


@pytest.mark.parametrize(
    ("section", "fields", "expected"),
    [
        ("low_latency", {"k": 2**40}, f"k = 1099511627776: must be between 1 and {K_MAX}"),
        ("low_latency", {"n": N_MAX + 1}, f"n = {N_MAX + 1}: must be between 1 and {N_MAX}"),
        ("low_latency", {"n": -(10**5000)}, "n = <-integer of 16610 bits>: must be between 1"),
        ("low_latency", {"tactic": [128, 8, 1, 65]}, "split_k must be between 1 and 64"),
        ("low_latency", {"tactic": [0, 8, 1, 1]}, f"cta_k must be between 1 and {K_MAX}"),
        ("cute_dsl", {"max_rows": ROWS_MAX + 1}, f"must be between 1 and {ROWS_MAX}"),
        ("cute_dsl", {"tactic": [[128, 2**40], [1, 1], True, False, 1]}, "mma sizes 1..1024"),
        ("wide", {"tile": 2**63}, "tile = 9223372036854775808: must be between 8 and 128"),
    ],
)
def test_numbers_past_their_bound_are_refused(section, fields, expected):
    base = {"low_latency": LOW, "cute_dsl": CUTE, "wide": {**LOW, "tile": 16}}[section]
    if section == "wide":
        base = {key: base[key] for key in ("n", "k", "tile", "tactic")}
    found = problems({"meta": META, section: [{**base, **fields}]})
    assert len(found) == 1 and expected in found[0], found


def test_a_section_past_its_entry_bound_is_refused():
    entries = [{**LOW, "n": n + 1} for n in range(MAX_ENTRIES + 1)]
    assert problems({"meta": META, "low_latency": entries}) == [
        f"pins.json: [[low_latency]]: has {MAX_ENTRIES + 1} entries; a section holds at most "
        f"{MAX_ENTRIES}"
    ]


def test_the_schema_version_is_bounded_and_huge_json_integers_name_their_field(tmp_path):
    path = tmp_path / "pins.json"
    path.write_text(
        '{"meta": {"device": "sm_103", "flashinfer": "", "schema": ' + "9" * 5000 + "}}"
    )
    assert file_problems(path) == [
        f"{path}: [meta]: schema = <integer of 5000 digits>: is too long"
    ]
    wide = '{"n": 1, "k": 2, "tile": 8, "tactic": [128, 1, 1, 1], "tile": -' + "1" * 100 + "}"
    path.write_text('{"meta": {"device": "sm_103", "flashinfer": ""}, "wide": [' + wide + "]}")
    assert file_problems(path) == [
        f"{path}: [[wide]] #1: tile = <-integer of 100 digits>: is given twice; give each field "
        "once",
        f"{path}: [[wide]] #1: tile = <-integer of 100 digits>: must be between 8 and 128",
    ]


# --- values that cannot be printed ------------------------------------------------------------


def test_problem_messages_never_format_an_unprintable_value():
    assert sys.get_int_max_str_digits() != 0
    deep: list = []
    for _ in range(100_000):
        deep = [deep]

    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    for value in (
        10**10_000,
        -(10**10_000),
        deep,
        Hostile(),
        "x" * 10**6,
        {i: i for i in range(10**5)},
    ):
        text = str(PinProblem("f.toml", "[[wide]] #1", "n", value, "must be small"))
        assert text.startswith("f.toml: [[wide]] #1: n = ") and len(text) < 400
        assert len(safe_repr(value)) < 200


def test_an_error_with_many_problems_lists_a_bounded_number():
    entries = [{**LOW, "n": None} for _ in range(500)]
    with pytest.raises(PinTableError) as error:
        PinTable.from_mapping({"meta": META, "low_latency": entries}, source="many.json")
    assert len(error.value.problems) == 500
    lines = str(error.value).splitlines()
    assert len(lines) == MAX_SHOWN_PROBLEMS + 2 and lines[-1].strip() == "... and 450 more"
    assert error.value.one_line().endswith("; ... and 450 more")


# --- files that are not pin files --------------------------------------------------------------


def write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        (
            "bad.toml",
            b'[meta]\ndevice = "sm_103\xff"\n',
            "file: is not UTF-8 text (byte 0xff at line 2",
        ),
        # Random bytes, seeded: every run (and every pytest-xdist worker) collects the same case.
        (
            "bad.json",
            random.Random(64).randbytes(64).replace(b"\x00", b"\xff") + b"\xff",
            "file: is not UTF-8 text",
        ),
        (
            "deep.json",
            b'{"meta": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
            "JSON: nests too deeply to read",
        ),
        ("deep.toml", b"x = " + b"[" * 100_000 + b"]" * 100_000, "TOML: nests too deeply to read"),
        (
            "inline.toml",
            b"x = " + b"{a=" * 50_000 + b"1" + b"}" * 50_000,
            "TOML: nests too deeply to read",
        ),
        (
            "huge.toml",
            b"[meta]\nschema = " + b"9" * 5000 + b"\n",
            "TOML: holds a value too long to read",
        ),
        (
            "big.toml",
            b"# pad\n" * (MAX_FILE_BYTES // 6 + 1),
            f"file: is larger than {MAX_FILE_BYTES} bytes",
        ),
        ("cut.toml", b'[meta]\ndevice = "sm_1', "TOML: Unterminated string"),
        ("cut.json", b'{"meta": {"device": "sm_1', "JSON: Unterminated string"),
        (
            "twice.toml",
            b'[meta]\ndevice = "sm_103"\ndevice = "sm_100"\n',
            "TOML: Cannot overwrite a value",
        ),
        (
            "twice.json",
            b'{"meta": {"device": "sm_103", "flashinfer": ""}, "meta": {}}',
            "top level: meta: is given twice",
        ),
        ("notes.txt", b"", "file: must end in .toml or .json"),
    ],
)
def test_a_file_that_is_not_a_pin_table_is_refused_naming_it(tmp_path, name, data, expected):
    path = write(tmp_path, name, data)
    found = file_problems(path)
    assert any(expected in p for p in found), found


def test_special_files_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "pins.toml"
    os.mkfifo(fifo)
    assert file_problems(fifo) == [f"{fifo}: file: is not a regular file"]
    directory = tmp_path / "dir.json"
    directory.mkdir()
    assert file_problems(directory) == [f"{directory}: file: cannot be read (Is a directory)"]
    assert file_problems(tmp_path / "absent.toml") == [
        f"{tmp_path / 'absent.toml'}: file: cannot be read (No such file or directory)"
    ]


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = write(tmp_path, "bom.toml", b'\xef\xbb\xbf[meta]\ndevice = "sm_103"\nflashinfer = ""\n')
    assert PinTable.from_file(path).meta.device == "sm_103"


def test_an_unexpected_error_inside_an_entry_names_the_entry_and_field():
    class Exploding(dict):
        def __contains__(self, key: object) -> bool:
            if key == "k":
                raise RuntimeError("boom")
            return super().__contains__(key)

    found = problems({"meta": META, "low_latency": [LOW, Exploding(LOW)]})
    assert found == ["pins.json: [[low_latency]] #2: k could not be read (RuntimeError: boom)"]
