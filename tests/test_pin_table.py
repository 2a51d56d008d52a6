"""Pin tables: loading, validation errors naming file/entry/field/value, lookups."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from fi_patches.pins import PinTable, PinTableError

META = {"device": "sm_103", "flashinfer": ">=0.7.0,<0.8"}


def entry(**fields):
    base = {"n": 7168, "k": 1536, "min_rows": 5, "max_rows": 8, "tactic": [128, 8, 1, 1]}
    base.update(fields)
    return base


def problems(data, source="<test>"):
    with pytest.raises(PinTableError) as error:
        PinTable.from_mapping(data, source=source)
    return [str(p) for p in error.value.problems]


def test_toml_and_json_files_load_to_the_same_table(tmp_path):
    toml = tmp_path / "pins.toml"
    toml.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0,<0.8"\nnote = "GB300 TP4"\n\n'
        "[[low_latency]]\nn = 7168\nk = 1536\nmin_rows = 5\nmax_rows = 8\ntactic = [128, 8, 1, 1]\n\n"
        "[[wide]]\nn = 7168\nk = 1536\ntile = 16\ntactic = [128, 8, 1, 1]\n"
    )
    js = tmp_path / "pins.json"
    js.write_text(json.dumps(PinTable.from_file(toml).to_mapping()))
    a, b = PinTable.from_file(toml), PinTable.from_file(js)
    assert a.to_mapping() == b.to_mapping()
    assert a.meta.device == "sm_103" and a.meta.note == "GB300 TP4"
    assert a.low_latency_tactic(7168, 1536, 6) == (128, 8, 1, 1)
    assert a.low_latency_tactic(7168, 1536, 4) is None
    assert a.wide_pin(7168, 1536, 16).tactic == (128, 8, 1, 1)
    assert a.source == str(toml)


def test_malformed_toml_names_the_file_and_position(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[meta\ndevice = 1\n")
    with pytest.raises(PinTableError) as error:
        PinTable.from_file(path)
    message = str(error.value)
    assert str(path) in message and "TOML" in message and "line 1" in message


def test_malformed_json_names_the_file_and_position(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"meta": {"device": "sm_103",}}')
    with pytest.raises(PinTableError) as error:
        PinTable.from_file(path)
    message = str(error.value)
    assert str(path) in message and "JSON" in message and "line 1 column" in message


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(PinTableError, match="cannot be read"):
        PinTable.from_file(tmp_path / "absent.toml")
    other = tmp_path / "pins.yaml"
    other.write_text("meta: {}")
    with pytest.raises(PinTableError, match=r"pins\.yaml: file: must end in \.toml or \.json"):
        PinTable.from_file(other)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"n": "7168"}, "[[low_latency]] #1: n = '7168': must be an integer, not str"),
        ({"k": True}, "[[low_latency]] #1: k = True: must be an integer, not bool"),
        ({"max_rows": 9}, "[[low_latency]] #1: max_rows = 9: must be between 1 and 8"),
        ({"min_rows": 0}, "[[low_latency]] #1: min_rows = 0: must be between 1 and 8"),
        (
            {"min_rows": 6, "max_rows": 5},
            "[[low_latency]] #1: min_rows = 6: must not exceed max_rows (5)",
        ),
        (
            {"tactic": [128, 8, 1]},
            "[[low_latency]] #1: tactic = [128, 8, 1]: must be a list of 4 integers",
        ),
        ({"tactic": [128, 8, 1, "1"]}, "tactic = [128, 8, 1, '1']: must be a list of 4 integers"),
        ({"split_k": 2}, "[[low_latency]] #1: split_k = 2: is not a known field"),
    ],
)
def test_bad_entry_fields_are_named_with_their_value(fields, expected):
    found = problems({"meta": META, "low_latency": [entry(**fields)]}, source="pins.toml")
    assert any(expected in p for p in found), found
    assert all(p.startswith("pins.toml: ") for p in found)


def test_missing_required_fields():
    found = problems({"meta": META, "low_latency": [{"n": 1, "k": 128}]})
    assert "<test>: [[low_latency]] #1: max_rows = None: is required" in found
    assert "<test>: [[low_latency]] #1: tactic = None: is required" in found


def test_overlapping_row_ranges_of_one_shape_are_rejected():
    found = problems(
        {
            "meta": META,
            "low_latency": [entry(min_rows=1, max_rows=4), entry(min_rows=3, max_rows=8)],
        }
    )
    assert found == [
        "<test>: [[low_latency]] #2: min_rows = 3: rows 3..8 overlap entry #1's rows 1..4 "
        "for n=7168 k=1536"
    ]
    # The same ranges on another shape do not overlap.
    PinTable.from_mapping(
        {"meta": META, "low_latency": [entry(max_rows=8), entry(n=1536, k=7168, max_rows=8)]}
    )


def test_meta_is_required_and_checked():
    assert problems({"low_latency": []}) == ["<test>: [meta]: is required (device and flashinfer)"]
    found = problems(
        {"meta": {"device": "hopper", "flashinfer": "0.7.4!", "schema": 2, "color": 1}}
    )
    assert any("device = 'hopper': must be an arch such as 'sm_103'" in p for p in found)
    assert any("flashinfer = '0.7.4!': '0.7.4!' is not a version specifier" in p for p in found)
    assert any("schema = 2: this fi_patches reads schema 1" in p for p in found)
    assert any("color = 1: is not a known field" in p for p in found)


@pytest.mark.parametrize("any_release", ["*", "", " * "])
def test_flashinfer_star_or_empty_means_any_release(tmp_path, any_release):
    path = tmp_path / "pins.toml"
    path.write_text(
        f'[meta]\ndevice = "*"\nflashinfer = "{any_release}"\n\n'
        "[[low_latency]]\nn = 7168\nk = 1536\nmax_rows = 8\ntactic = [128, 8, 1, 1]\n"
    )
    table = PinTable.from_file(path)
    for release in ("0.6.0", "0.7.4", "0.7.5rc1", "1.0.0"):
        assert table.other_release(Version(release)) is None, release
    again = PinTable.from_mapping(json.loads(json.dumps(table.to_mapping())))
    assert again.meta.flashinfer == table.meta.flashinfer
    assert table.low_latency_tactic(7168, 1536, 8) == (128, 8, 1, 1)
    refused = problems({"meta": {"device": "*", "flashinfer": "**"}})
    assert refused == [
        "<test>: [meta]: flashinfer = '**': '**' is not a version specifier such as "
        "'>=0.7.0,<=0.7.4', or '*' for any release"
    ]


def test_unknown_sections_and_wrong_shapes():
    found = problems({"meta": META, "low_latncy": [], "low_latency": {"n": 1}})
    assert any("top level: low_latncy = '...': is not a known section" in p for p in found)
    assert any("[[low_latency]]: must be an array of tables" in p for p in found)
    assert problems([1, 2]) == ["<test>: top level: must be a table, not list"]


def test_every_problem_is_reported_at_once():
    found = problems(
        {"meta": META, "low_latency": [entry(n=0), entry(max_rows=12), entry(tactic="fast")]}
    )
    assert len(found) == 3
    assert [p.split(": ")[1] for p in found] == [
        "[[low_latency]] #1",
        "[[low_latency]] #2",
        "[[low_latency]] #3",
    ]


def test_cute_dsl_ranges_start_after_the_previous_one_when_min_rows_is_left_out():
    tactic = [[128, 64], [1, 1], True, False, 1]
    table = PinTable.from_mapping(
        {
            "meta": META,
            "cute_dsl": [
                {"n": 7168, "k": 1536, "max_rows": 128, "tactic": tactic},
                {
                    "n": 7168,
                    "k": 1536,
                    "max_rows": 64,
                    "tactic": [[128, 32], [1, 1], True, False, 1],
                },
            ],
        }
    )
    assert [(e.min_rows, e.max_rows) for e in table.entries("cute_dsl")] == [(65, 128), (1, 64)]
    assert table.cute_dsl_tactic(7168, 1536, 65) == ((128, 64), (1, 1), True, False, 1)
    assert table.cute_dsl_tactic(7168, 1536, 1) == ((128, 32), (1, 1), True, False, 1)
    assert table.cute_dsl_tactic(7168, 1536, 129) is None


def test_wide_entries_are_validated():
    found = problems(
        {
            "meta": META,
            "wide": [
                {"n": 7168, "k": 1536, "tile": 20, "tactic": [128, 8, 1, 1]},
                {"n": 7168, "k": 1536, "tile": 136, "tactic": [128, 8, 1, 1]},
                {"n": 7168, "k": 1536, "tile": 16, "tactic": [128, 8, 1, 1]},
                {"n": 7168, "k": 1536, "tile": 16, "tactic": [256, 4, 1, 1]},
            ],
        }
    )
    assert "<test>: [[wide]] #1: tile = 20: must be a multiple of 8" in found
    assert "<test>: [[wide]] #2: tile = 136: must be between 8 and 128" in found
    assert (
        "<test>: [[wide]] #4: tile = 16: n=7168 k=1536 tile=16 is already pinned by entry #3"
        in found
    )


def test_another_device_skips_a_table_and_another_release_checks_it_entry_by_entry():
    from packaging.version import Version

    table = PinTable.from_mapping({"meta": {"device": "sm_103", "flashinfer": "==0.7.4"}})
    assert table.skip_reason("sm_103", Version("0.7.4")) is None
    assert "chosen on sm_103; this device is sm_100" in table.skip_reason(
        "sm_100", Version("0.7.4")
    )
    assert table.skip_reason("sm_103", Version("0.7.2.post1")) is None
    assert table.other_release(Version("0.7.4")) is None
    assert "chosen on FlashInfer ==0.7.4; installed is 0.7.2.post1, so each entry is checked" in (
        table.other_release(Version("0.7.2.post1")) or ""
    )
    anywhere = PinTable.from_mapping({"meta": {"device": "*", "flashinfer": ""}})
    assert anywhere.skip_reason(None, Version("0.9")) is None
    assert anywhere.other_release(Version("0.9")) is None


ranges = st.lists(
    st.tuples(st.integers(1, 8), st.integers(1, 8)).map(lambda t: (min(t), max(t))),
    min_size=1,
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(ranges)
def test_lookup_matches_the_entries_or_the_table_is_refused(spans):
    data = {
        "meta": META,
        "low_latency": [
            entry(min_rows=lo, max_rows=hi, tactic=[128, i + 1, 1, 1])
            for i, (lo, hi) in enumerate(spans)
        ],
    }
    overlapping = any(
        a[0] <= b[1] and b[0] <= a[1] for i, a in enumerate(spans) for b in spans[i + 1 :]
    )
    if overlapping:
        with pytest.raises(PinTableError, match="overlap"):
            PinTable.from_mapping(data)
        return
    table = PinTable.from_mapping(data)
    for rows in range(1, 9):
        owners = [i for i, (lo, hi) in enumerate(spans) if lo <= rows <= hi]
        expected = (128, owners[0] + 1, 1, 1) if owners else None
        assert table.low_latency_tactic(7168, 1536, rows) == expected
    assert PinTable.from_mapping(table.to_mapping()).to_mapping() == table.to_mapping()
