"""One invalid entry among valid ones refuses the whole table, in every checked section: the
error names the bad entry (and no good one), and nothing is applied (the body never runs, no
wrapper or table is left, and FlashInfer's runners offer what they offered before)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import fi_patches
from fi_patches.pinning import stack
from fi_patches.pinning.installation import installed_count
from fi_patches.pins import PinTable, PinTableError
from tests import cutedsl, lowlat, toy_op
from tests.conftest import flashinfer_or_skip, require_feature
from tests.mxfp8_inputs import Mxfp8Problem

N, K = 7168, 1536


def refused(table: PinTable, observe: Callable[[], Any]) -> str:
    """Enter ``table``; it must be refused with nothing applied. Returns the error's text."""
    before = observe()
    with pytest.raises(PinTableError) as error, fi_patches.pinned_tactics(table):
        pytest.fail(f"{table.source} was applied although one entry is invalid")
    assert installed_count() == 0
    assert stack.opened_tables() == ()
    assert observe() == before
    return str(error.value)


def test_low_latency(pinning: str) -> None:
    runner = lowlat.runner()
    good_1, good_8 = lowlat.stock(N, K, 1)[1], lowlat.stock(N, K, 8)[1]
    offered = set(lowlat.stock(N, K, 4))
    bogus = next(t for t in [(128, 12, 1, 8), (1024, 12, 1, 8), (640, 1, 1, 1)] if t not in offered)
    table = lowlat.table(
        lowlat.entry(N, K, 5, 8, good_8),
        lowlat.entry(N, K, 3, 4, bogus),
        lowlat.entry(N, K, 1, 1, good_1),
        source="three.toml",
    )

    def observe() -> Any:
        return [lowlat.offered(runner, N, K, rows) for rows in (1, 4, 8)]

    message = refused(table, observe)
    assert "three.toml: [[low_latency]] #2: tactic" in message and str(list(bogus)) in message
    assert "#1" not in message and "#3" not in message
    # The good entries alone apply: the refusal is the bad entry's doing.
    alone = lowlat.table(
        lowlat.entry(N, K, 5, 8, good_8), lowlat.entry(N, K, 1, 1, good_1), source="two.toml"
    )
    with fi_patches.pinned_tactics(alone):
        assert lowlat.offered(runner, N, K, 8) == [good_8]
        assert lowlat.offered(runner, N, K, 1) == [good_1]


@pytest.mark.simulated
def test_cute_dsl(simulated: Any) -> None:
    from fi_patches.compat import refresh

    refresh()
    require_feature("pinned_cute_dsl")
    plain = [t for t in cutedsl.stock(N, K, 64)[1:] if t[4] == 1]
    split_32 = next(t for t in cutedsl.stock(N, K, 32)[1:] if t[4] > 1)  # cannot run at 33 rows
    good_32 = next(t for t in cutedsl.stock(N, K, 32)[1:] if t[4] == 1)
    table = cutedsl.table(
        cutedsl.entry(N, K, 17, 32, good_32),
        cutedsl.entry(N, K, 33, 64, split_32),
        cutedsl.entry(N, K, 65, 128, plain[0]),
        source="three.toml",
    )

    def observe() -> Any:  # what the real runner offers now, at each entry's rows
        return [cutedsl.stock(N, K, rows) for rows in (32, 64, 128)]

    message = refused(table, observe)
    assert "three.toml: [[cute_dsl]] #2: tactic = " in message
    assert "cannot run as pinned for n=7168 k=1536 rows=33" in message
    assert "#1" not in message and "#3" not in message


def test_wide(sm103: str) -> None:
    flashinfer_or_skip()
    require_feature("wide_tile")
    from fi_patches.wide.launch import wide_runner

    def offered(rows: int) -> list[Any]:
        inputs = Mxfp8Problem(N, K, rows).runner_inputs()
        return list(wide_runner().get_valid_tactics(inputs, None))

    # The good pins are tactics FlashInfer-side tuning would offer: the runner's own lists.
    # A [[wide]] tactic is the runner's tactic without its leading tile.
    good_16, good_48 = offered(16)[0][1:], offered(48)[0][1:]
    at_32 = [t[1:] for t in offered(32)]
    big = next(t for t in [(256, 8, 1, 1), (512, 6, 1, 1)] if t not in at_32)
    table = PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
            "wide": [
                {"n": N, "k": K, "tile": 16, "tactic": list(good_16)},
                {"n": N, "k": K, "tile": 32, "tactic": list(big)},
                {"n": N, "k": K, "tile": 48, "tactic": list(good_48)},
            ],
        },
        source="three.toml",
    )
    message = refused(table, lambda: [offered(rows) for rows in (16, 32, 48)])
    assert "three.toml: [[wide]] #2: tactic = " in message
    assert "#1" not in message and "#3" not in message


def test_pin(sm103: str, monkeypatch: pytest.MonkeyPatch) -> None:
    flashinfer_or_skip()
    require_feature("pinned_ops")
    toy_op.start(monkeypatch, 13)
    split = toy_op.runners()[1]

    def entry(n: int, runner: str = "ToySplitRunner") -> dict[str, Any]:
        shapes = [["rows", toy_op.K], [toy_op.K, n]]
        return {"op": toy_op.OP, "runner": runner, "shapes": shapes, "max_rows": 8, "tactic": 2}

    table = PinTable.from_mapping(
        {
            # Chosen on an older release: the installed one checks its runners are still there.
            "meta": {"device": "*", "flashinfer": "==0.7.3"},
            "pin": [entry(32), entry(48), entry(64, "RunnerRemovedInThisRelease"), entry(80)],
        },
        source="four.toml",
    )

    def observe() -> Any:
        return [split.get_valid_tactics(list(toy_op.operands(8, n)), None) for n in (32, 48, 80)]

    message = refused(table, observe)
    assert 'four.toml: [[pin]] #3: runner = "RunnerRemovedInThisRelease"' in message
    assert "[[pin]] #1" not in message and "[[pin]] #2" not in message
    assert "[[pin]] #4" not in message
