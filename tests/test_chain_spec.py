"""CHAIN.toml parsing: the shipped DeepSeek example, and every error naming the file, the entry,
the field and its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from fi_patches.chain.spec import (
    ChainSpec,
    ChainSpecError,
    Settings,
    chain_path,
    section_for,
    shipped_examples,
)
from tests.chain_helpers import EXAMPLE

# Nothing here depends on the installed FlashInfer release (see pyproject.toml).
pytestmark = pytest.mark.release_independent


# DeepSeek-V3's config.json
HIDDEN, Q_LORA, KV_LORA, ROPE, NOPE, V_HEAD, HEADS, TP = 7168, 1536, 512, 64, 128, 128, 128, 4


def test_the_deepseek_example_holds_the_shapes_its_comments_derive():
    spec = ChainSpec.from_file(EXAMPLE)
    shapes = {op.name: (op.n, op.k) for op in spec.ops}
    assert list(shapes) == ["fused_wqa_wkv", "wq_b", "wo_b"]
    assert shapes["fused_wqa_wkv"] == (Q_LORA + KV_LORA + ROPE, HIDDEN) == (2112, 7168)
    assert shapes["wq_b"] == (HEADS * (NOPE + ROPE) // TP, Q_LORA) == (6144, 1536)
    assert shapes["wo_b"] == (HIDDEN, HEADS * V_HEAD // TP) == (7168, 4096)
    text = EXAMPLE.read_text()
    for fact in (
        "hidden_size = 7168",
        "q_lora_rank = 1536",
        "kv_lora_rank = 512",
        "qk_rope_head_dim = 64",
        "num_attention_heads = 128",
        "v_head_dim = 128",
        "24576 / 4 = 6144",
        "16384 / 4 = 4096",
        "1536 + (512 + 64) = 2112",
    ):
        assert fact in text
    assert [b.label for b in spec.buckets] == [
        "1",
        "2",
        "3..4",
        "5..8",
        "9..16",
        "17..32",
        "33..48",
        "65..128",
    ]
    assert [b.rows for b in spec.buckets] == [1, 2, 4, 8, 16, 32, 48, 128]
    assert spec.settings.max_candidates == 32 and spec.name == "deepseek-v3-attention-tp4"


def test_routes_by_rows():
    assert [section_for("mxfp8", r) for r in (1, 8, 9, 48, 49)] == [
        "low_latency",
        "low_latency",
        "wide",
        "wide",
        "cute_dsl",
    ]
    assert section_for("low_latency", 9) is None and section_for("wide", 8) is None
    assert section_for("cute_dsl", 4096) == "cute_dsl"


def minimal(**chain):
    data = {
        "bucket": [{"min_rows": 5, "max_rows": 8}],
        "op": [{"name": "a", "n": 256, "k": 512, "runner": "low_latency"}],
    }
    if chain:
        data["chain"] = chain
    return data


def problems(data):
    with pytest.raises(ChainSpecError) as info:
        ChainSpec.from_mapping(data, source="c.toml")
    return [str(p) for p in info.value.problems]


def test_defaults_and_settings():
    spec = ChainSpec.from_mapping(minimal(), source="c.toml", default_name="c")
    assert spec.settings == Settings() and spec.name == "c"
    spec = ChainSpec.from_mapping(minimal(repeats=3, tie_tolerance=0, cold_l2=False), "c.toml")
    assert (spec.settings.repeats, spec.settings.tie_tolerance, spec.settings.cold_l2) == (
        3,
        0.0,
        False,
    )


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        ({"repeats": 0}, "c.toml: [chain]: repeats = 0: must be between 1 and 1000"),
        ({"replays": 10**6}, "c.toml: [chain]: replays = 1000000: must be between 1 and 10000"),
        (
            {"tie_tolerance": 0.9},
            "c.toml: [chain]: tie_tolerance = 0.9: must be between 0.0 and 0.5",
        ),
        (
            {"tie_tolerance": "1%"},
            'c.toml: [chain]: tie_tolerance = "1%": must be a number, not str',
        ),
        ({"cold_l2": 1}, "c.toml: [chain]: cold_l2 = 1: must be true or false, not int"),
        ({"max_passes": True}, "c.toml: [chain]: max_passes = true: must be an integer, not bool"),
        ({"repeat": 3}, "c.toml: [chain]: repeat = 3: is not a known field"),
    ],
)
def test_bad_chain_settings(chain, expected):
    [found] = problems(minimal(**chain))
    assert found.startswith(expected)


def test_bad_ops_and_buckets_all_reported_at_once():
    data = minimal()
    data["op"] = [
        {"name": "a", "n": 0, "k": 512, "runner": "low_latency"},
        {"name": "b", "n": 256, "k": 2**21, "runner": "fast"},
        {"name": "", "n": 256, "k": 512, "runner": "wide"},
        {"n": 256, "k": 512, "runner": "wide", "tile": 16},
    ]
    data["bucket"] = [{"min_rows": 8, "max_rows": 5}, {"min_rows": 1, "max_rows": 4, "rows": 5}]
    found = problems(data)
    assert "c.toml: [[op]] #1: n = 0: must be between 1 and 1048576" in found
    assert "c.toml: [[op]] #2: k = 2097152: must be between 1 and 1048576" in found
    assert (
        'c.toml: [[op]] #2: runner = "fast": must be one of low_latency, wide, cute_dsl, mxfp8'
        in found
    )
    assert 'c.toml: [[op]] #3: name = "": must not be empty' in found
    assert "c.toml: [[op]] #4: name: is required" in found
    assert any(f.startswith("c.toml: [[op]] #4: tile = 16: is not a known field") for f in found)
    assert "c.toml: [[bucket]] #1: min_rows = 8: must not exceed max_rows (5)" in found
    assert "c.toml: [[bucket]] #2: rows = 5: must be within min_rows..max_rows (1..4)" in found


def test_missing_sections_unknown_sections_and_duplicate_names():
    assert problems({"op": [], "extra": 1}) == [
        "c.toml: top level: extra: is not a known section (known: chain, bucket, op)",
        "c.toml: [[bucket]]: must be a non-empty array of tables",
        "c.toml: [[op]]: must be a non-empty array of tables",
    ]
    data = minimal()
    data["op"].append(dict(data["op"][0]))
    assert problems(data) == ['c.toml: [[op]] #2: name = "a": is already the name of op #1']


def test_buckets_are_ascending_and_disjoint():
    data = minimal()
    data["bucket"] = [{"min_rows": 3, "max_rows": 4}, {"min_rows": 4, "max_rows": 8}]
    [found] = problems(data)
    assert found.startswith("c.toml: [[bucket]] #2: min_rows = 4: must be above the previous")


def test_a_bucket_the_runner_does_not_serve():
    data = minimal()
    data["bucket"] = [{"min_rows": 5, "max_rows": 16}]
    [found] = problems(data)
    assert found == (
        "c.toml: [[bucket]] #1: max_rows = 16: op 'a' (runner low_latency) serves rows 5..8 of it"
    )


def test_a_bucket_spanning_two_routes_or_two_wide_tiles():
    data = minimal()
    data["op"][0]["runner"] = "mxfp8"
    data["bucket"] = [{"min_rows": 5, "max_rows": 12}]
    [found] = problems(data)
    assert "rows 5..12 span the low_latency and wide routes of op 'a' (runner mxfp8)" in found
    data["bucket"] = [{"min_rows": 9, "max_rows": 20}]
    [found] = problems(data)
    assert "rows 9..20 need wide tiles [16, 32] for op 'a'" in found
    data["bucket"] = [{"min_rows": 9, "max_rows": 12}, {"min_rows": 13, "max_rows": 16}]
    [found] = problems(data)
    assert found.startswith(
        "c.toml: [[bucket]] #2: min_rows = 13: rows 13..16 use wide tile 16 like [[bucket]] #1"
    )


def test_files(tmp_path):
    with pytest.raises(ChainSpecError, match=r"missing.toml: file: cannot be read"):
        ChainSpec.from_file(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[chain\n")
    with pytest.raises(ChainSpecError, match=r"bad.toml: TOML: "):
        ChainSpec.from_file(bad)


def test_a_shipped_example_is_found_by_name_and_a_path_wins(tmp_path, monkeypatch):
    assert shipped_examples() == ["deepseek_v3_tp4"]
    assert EXAMPLE.is_file() and EXAMPLE.parent.parent.name == "chain"
    monkeypatch.chdir(tmp_path)
    assert chain_path("deepseek_v3_tp4") == EXAMPLE
    Path("deepseek_v3_tp4.toml").write_text("")
    assert chain_path("deepseek_v3_tp4") == Path("deepseek_v3_tp4.toml")  # the user's own file
    assert chain_path("x/deepseek_v3_tp4") == Path("x/deepseek_v3_tp4")  # a path stays a path
    assert chain_path("nope.toml") == Path("nope.toml")  # reported as unreadable
    with pytest.raises(ChainSpecError) as error:
        chain_path("deepseek_v3")  # a typo: named with the examples there are
    assert str(error.value).endswith(
        "deepseek_v3: --chain: is no file, no deepseek_v3.toml here and no shipped example "
        "(shipped: deepseek_v3_tp4)"
    )
