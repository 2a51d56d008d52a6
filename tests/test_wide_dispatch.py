"""Tile and tactic selection for ``wide_mm``, and the ``[[wide]]`` pin check (CPU)."""

from __future__ import annotations

import logging

import pytest

from fi_patches.pinning import stack
from fi_patches.pins import PinTable
from fi_patches.wide.tactics import (
    TILE_ROUNDING,
    WIDE_MAX_ROWS,
    WIDE_MIN_ROWS,
    choose_tactic,
    default_tactic,
    pick_tile,
    wide_pin_reason,
    wide_tactics,
)

N, K = 7168, 1536


def _table(*entries: dict) -> PinTable:
    return PinTable.from_mapping(
        {"meta": {"device": "sm_103", "flashinfer": ">=0.7.0"}, "wide": list(entries)}
    )


def test_pick_tile_rounds_rows_up() -> None:
    for rows in range(WIDE_MIN_ROWS, WIDE_MAX_ROWS + 1):
        tile = pick_tile(rows)
        assert tile % TILE_ROUNDING == 0 and tile - TILE_ROUNDING < rows <= tile
    assert pick_tile(9, rounding=8) == 16 and pick_tile(17, rounding=8) == 24
    assert pick_tile(3) == 16
    with pytest.raises(ValueError, match="exceed"):
        pick_tile(WIDE_MAX_ROWS + 1)
    assert pick_tile(60, max_rows=64) == 64
    with pytest.raises(ValueError, match="multiple of 8"):
        pick_tile(9, rounding=12)


def test_explicit_tactic_wins_and_is_checked() -> None:
    assert choose_tactic(N, K, 32, 20, (256, 4, 1, 2)) == (256, 4, 1, 2)
    with pytest.raises(ValueError, match="shared memory"):
        choose_tactic(N, K, 32, 20, (512, 3, 1, 1))
    with pytest.raises(ValueError, match="exceed the 16-row tile"):
        choose_tactic(N, K, 16, 20, (128, 8, 1, 1))
    assert choose_tactic(N, K, 16, 20, (128, 8, 1, 1), sfb_per_cta_packed=True) == (128, 8, 1, 1)


def test_pin_is_used_then_default() -> None:
    assert choose_tactic(N, K, 32, 20) == wide_tactics(N, K, 32)[0] == default_tactic()
    table = _table({"n": N, "k": K, "tile": 32, "tactic": [256, 4, 1, 2]})
    with stack.isolated(table):
        assert choose_tactic(N, K, 32, 20) == (256, 4, 1, 2)
        assert choose_tactic(N, K, 48, 40) == default_tactic()
        assert choose_tactic(N, K, 32, 20, (128, 7, 1, 1)) == (128, 7, 1, 1)


def test_invalid_pin_is_skipped_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    table = _table({"n": N, "k": K, "tile": 48, "tactic": [512, 4, 1, 1]})
    with stack.isolated(table), caplog.at_level(logging.WARNING, logger="fi_patches"):
        assert choose_tactic(N, K, 48, 40) == default_tactic()
        assert choose_tactic(N, K, 48, 41) == default_tactic()
    warnings = [r for r in caplog.records if "ignoring [[wide]] pin" in r.getMessage()]
    assert len(warnings) == 1 and "shared memory" in warnings[0].getMessage()


def test_wide_pin_reason() -> None:
    assert wide_pin_reason(N, K, 32, (256, 4, 1, 2)) is None
    assert "TMEM" in (wide_pin_reason(N, 2048, 16, (1024, 2, 1, 1)) or "")
    assert "shared memory" in (wide_pin_reason(N, K, 48, (512, 4, 1, 1)) or "")
    assert "not a multiple of cta_k" in (wide_pin_reason(N, 1664, 16, (256, 4, 1, 1)) or "")
    assert "sfb_tmem_stages must be 1" in (wide_pin_reason(N, K, 16, (128, 8, 2, 1)) or "")
    assert "four integers" in (wide_pin_reason(N, K, 16, (128, 8, 1)) or "")
    assert "multiple of 8" in (wide_pin_reason(N, K, 20, (128, 8, 1, 1)) or "")
