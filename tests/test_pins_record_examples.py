"""``pins record`` on the shipped examples (real FlashInfer 0.7.4 tuner output): a cached
winner that is FlashInfer's default tactic (-1) is left unpinned and counted, not a reason to
refuse the table; a merge with many disagreements keeps its note within ``[meta] note``'s
limit."""

from __future__ import annotations

import pytest

from fi_patches.cli import main
from fi_patches.examples import ROOT
from fi_patches.pins.schema import TEXT_MAX
from fi_patches.pins.table import PinTable
from fi_patches.tools.record import is_fallback, read_cache

pytestmark = pytest.mark.release_independent  # the examples are FlashInfer 0.7.4's output


def test_default_tactic_winners_are_left_unpinned(pinning, tmp_path, capsys):
    store = ROOT / "tuner_store"
    entries, _ = read_cache(store)
    fallback = sum(1 for e in entries if is_fallback(e.tactic))
    assert fallback  # FlashInfer's v2 tuner kept its default for some buckets
    out = tmp_path / "store.toml"
    assert main(["pins", "record", "--from", str(store), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{fallback} cached winners were FlashInfer's default tactic (-1)" in printed
    mapping = PinTable.from_file(out).to_mapping()
    tactics = [
        e["tactic"] for section, items in mapping.items() if section != "meta" for e in items
    ]
    assert tactics and -1 not in tactics


def test_a_merge_of_many_disagreements_keeps_its_note_short(pinning, tmp_path, capsys):
    out = tmp_path / "pins.toml"
    sources = ["--from", str(ROOT / "rank0.json"), "--from", str(ROOT / "rank1.json")]
    assert main(["pins", "record", *sources, "--out", str(out)]) == 0
    note = PinTable.from_file(out).meta.note
    assert len(note) <= TEXT_MAX
    assert "30 disagree" in note and note.endswith(" more")
