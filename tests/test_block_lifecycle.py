"""Blocks against ``disable()``/``enable()`` and against each other: counts follow the blocks
that took them, a block made inert stays inert until it exits, preseed blocks leave in any
order, and the routers' memos do not grow with the blocks entered (CPU, real FlashInfer)."""

from __future__ import annotations

import gc
import threading

import pytest

import fi_patches
from fi_patches.mxfp8 import explain
from fi_patches.pinning import stack
from fi_patches.pinning.installation import installed_count
from tests import lowlat
from tests.workers import workers

N, K = lowlat.SHAPE


@pytest.fixture
def pins(pinning: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return lowlat.non_split_alternative(N, K, 8), lowlat.non_split_alternative(N, K, 8, skip=2)


def _enter(table: object, **kwargs: object) -> object:
    block = fi_patches.pinned_tactics(table, **kwargs)  # type: ignore[arg-type]
    block.__enter__()
    return block


def test_an_older_block_leaving_after_disable_and_enable_keeps_a_newer_one_pinned(pins):
    first, second = pins
    runner = lowlat.runner()
    older = _enter(lowlat.table(lowlat.entry(N, K, 5, 8, first)))
    fi_patches.disable()
    fi_patches.enable()
    newer = _enter(lowlat.table(lowlat.entry(N, K, 5, 8, second)))
    try:
        older.__exit__(None, None, None)  # type: ignore[attr-defined]
        assert lowlat.offered(runner, N, K, 8) == [second]
    finally:
        newer.__exit__(None, None, None)  # type: ignore[attr-defined]
        fi_patches.disable()
    assert lowlat.offered(runner, N, K, 8) == lowlat.stock(N, K, 8)
    assert installed_count() == 0


def test_a_block_made_inert_by_disable_stays_inert_after_enable(pins):
    first, _ = pins
    other_n, other_k = lowlat.OTHER_SHAPE
    other_pin = lowlat.non_split_alternative(other_n, other_k, 8)
    runner = lowlat.runner()
    inert = _enter(lowlat.table(lowlat.entry(N, K, 5, 8, first)))
    fi_patches.disable()
    fi_patches.enable()
    try:
        assert lowlat.offered(runner, N, K, 8) == lowlat.stock(N, K, 8)
        with fi_patches.pinned_tactics(
            lowlat.table(lowlat.entry(other_n, other_k, 5, 8, other_pin))
        ):
            assert lowlat.offered(runner, other_n, other_k, 8) == [other_pin]
            assert lowlat.offered(runner, N, K, 8) == lowlat.stock(N, K, 8)
        assert stack.opened_tables() == ()
    finally:
        inert.__exit__(None, None, None)  # type: ignore[attr-defined]
        fi_patches.disable()


def test_the_rank_guards_installation_follows_its_blocks(pins):
    from fi_patches.ranks import GUARD

    first, second = pins
    older = _enter(lowlat.table(lowlat.entry(N, K, 5, 8, first)))
    fi_patches.disable()
    fi_patches.enable()
    newer = _enter(lowlat.table(lowlat.entry(N, K, 5, 8, second)))
    try:
        held = GUARD.count
        assert held >= 1
        older.__exit__(None, None, None)  # type: ignore[attr-defined]
        assert GUARD.count == held
    finally:
        newer.__exit__(None, None, None)  # type: ignore[attr-defined]
        fi_patches.disable()
    assert GUARD.count == 0


@pytest.mark.simulated
def test_preseed_blocks_left_out_of_order_leave_nothing_behind(pins, both, tuner):
    first, second = pins
    outer = _enter(lowlat.table(lowlat.entry(N, K, 5, 8, first)), mode="preseed")
    inner = _enter(lowlat.table(lowlat.entry(N, K, 5, 8, second)), mode="preseed")
    assert lowlat.served(tuner, N, K, 8) == second
    outer.__exit__(None, None, None)  # type: ignore[attr-defined]
    assert lowlat.served(tuner, N, K, 8) == second
    inner.__exit__(None, None, None)  # type: ignore[attr-defined]
    assert lowlat.served(tuner, N, K, 8) is None
    assert lowlat.cached_low_latency(tuner, N, K) == {}


@pytest.mark.simulated
def test_preseed_blocks_of_two_threads_interleaved_leave_nothing_behind(pins, both, tuner):
    first, second = pins
    steps = [threading.Event() for _ in range(4)]
    seen: dict[str, object] = {}

    def worker(pin: tuple[int, ...], enter: int, leave: int, name: str) -> None:
        assert steps[enter].wait(30), f"{name}: step {enter} never came"
        block = _enter(lowlat.table(lowlat.entry(N, K, 5, 8, pin)), mode="preseed")
        seen[name] = lowlat.served(tuner, N, K, 8)
        steps[enter + 1].set()
        assert steps[leave].wait(30), f"{name}: step {leave} never came"
        block.__exit__(None, None, None)  # type: ignore[attr-defined]
        if leave + 1 < len(steps):
            steps[leave + 1].set()

    with workers() as pool:  # a worker that raises or never finishes fails the test
        pool.start(worker, first, 0, 2, "a")
        pool.start(worker, second, 1, 3, "b")
        steps[0].set()
    assert seen == {"a": first, "b": second}  # each thread sees its own block's pin
    assert lowlat.served(tuner, N, K, 8) is None
    assert lowlat.cached_low_latency(tuner, N, K) == {}


def _live(kind: str) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o).__name__ == kind)


@pytest.mark.simulated
def test_route_memos_do_not_grow_with_the_blocks_entered(pins, simulated):
    """2,000 blocks, as a server opening one per request would, each routing ``explain`` and
    ``mm`` calls (``mm`` up to its launch, which fails on CPU): no scope and no memo row
    outlives its block."""
    from fi_patches import mxfp8 as routes
    from fi_patches.mxfp8 import mm
    from tests.mxfp8_inputs import Mxfp8Problem

    first, _ = pins
    table = lowlat.table(lowlat.entry(N, K, 5, 8, first))
    t = Mxfp8Problem(N, K, 6).tensors()

    def route_both(**kwargs: object) -> None:
        explain(N, K, 6, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(Exception, match="CUDA"):
            mm(t["a"], t["b"], t["b_scale"], x_scale=t["a_scale"], **kwargs)  # type: ignore[arg-type]

    route_both(pins=table)
    scopes_before, rows_before = _live("_Scope"), routes.memo_size()
    for _ in range(2000):
        with fi_patches.pinned_tactics(table):
            route_both()
            route_both(pins=table)
    assert _live("_Scope") - scopes_before < 10
    assert routes.memo_size() <= rows_before + 2


def test_a_class_wrapped_again_gets_its_wrapper_back_and_its_original_after(pinning, sm103):
    """A block entered per request wraps each live runner class again: it gets the wrapper it
    had (nothing rebuilt), and every exit leaves FlashInfer's own function in place."""
    from flashinfer.autotuner import TunableRunner

    from fi_patches.pins import PinTable
    from tests import toy_op

    class ToyRewrappedRunner(TunableRunner):
        def get_valid_tactics(self, inputs: object, profile: object) -> list[int]:
            return [1, 2]

        def forward(self, inputs: object, tactic: object = -1, **kw: object) -> object:
            return None

    entry = {
        "op": toy_op.OP,
        "runner": "ToyRewrappedRunner",
        "shapes": [["rows", toy_op.K], [toy_op.K, toy_op.WEIGHTS[0]]],
        "min_rows": 1,
        "max_rows": 8,
        "tactic": 2,
    }
    table = PinTable.from_mapping(
        {"meta": {"device": "*", "flashinfer": "*"}, "pin": [entry]}, source="lock.toml"
    )
    own = vars(ToyRewrappedRunner)["get_valid_tactics"]
    wrappers = []
    for _ in range(3):
        with fi_patches.pinned_tactics(table):
            wrappers.append(vars(ToyRewrappedRunner)["get_valid_tactics"])
        assert vars(ToyRewrappedRunner)["get_valid_tactics"] is own
    assert wrappers[0] is not own
    assert wrappers[0] is wrappers[1] is wrappers[2]


def test_route_memos_are_bounded_for_ever_new_tables(pins, sm103):
    """A long-lived context handed a new table on every call keeps at most ``MEMO_MAX`` routes,
    and not the tables of the routes it let go."""
    from fi_patches import mxfp8 as routes
    from fi_patches.pinning import stack
    from fi_patches.pinning.index import MEMO_MAX
    from fi_patches.pins import PinTable

    first, _ = pins
    mapping = lowlat.table(lowlat.entry(N, K, 5, 8, first)).to_mapping()
    made = 2 * (MEMO_MAX + stack._MEMO_MAX)
    for _ in range(made):
        explain(N, K, 6, pins=PinTable.from_mapping(mapping))
    assert 0 < routes.memo_size() <= MEMO_MAX
    assert _live("PinTable") < MEMO_MAX + stack._MEMO_MAX + 10 < made


def test_mapping_pins_are_accepted_by_mm_and_explain(pins, sm103):
    first, _ = pins
    mapping = {
        "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
        "low_latency": [lowlat.entry(N, K, 5, 8, first)],
    }
    choice = explain(N, K, 6, pins=mapping)
    assert choice.route.value == "cutedsl_low_latency"
    assert explain(N, K, 6, pins=mapping) is choice  # equal mappings share one memo row


def test_refresh_reads_a_pin_file_again_and_the_tables_in_force_follow(tmp_path, monkeypatch):
    """A pin file is read once per process: editing it changes nothing until
    ``fi_patches.refresh()``, after which the tables in force hold its new entries (the files
    read and the tables-in-force memo both start again on the next call)."""
    import fi_patches
    from fi_patches.pinning import stack
    from fi_patches.pins.table import lookup

    path = tmp_path / "pins.toml"

    def write(max_rows: int) -> None:
        path.write_text(
            '[meta]\ndevice = "*"\nflashinfer = ">=0.7.0,<0.8"\n\n[[low_latency]]\nn = 7168\n'
            f"k = 1536\nmin_rows = 5\nmax_rows = {max_rows}\ntactic = [128, 8, 1, 1]\n"
        )

    write(8)
    monkeypatch.setenv("FI_PATCHES_PINS", str(path))
    (first,) = stack.tables_in_force()
    assert lookup((first,), "low_latency", 7168, 1536, 8) is not None
    write(6)
    assert stack.tables_in_force() == (first,)
    fi_patches.refresh()
    (second,) = stack.tables_in_force()
    assert second is not first
    assert lookup((second,), "low_latency", 7168, 1536, 8) is None
    assert lookup((second,), "low_latency", 7168, 1536, 6) is not None


def test_installing_the_wrappers_over_and_over_is_warned_once(pins, caplog):
    """Blocks opened and left one after another install and remove the wrappers each time (each
    rewrites FlashInfer's classes, which CPython 3.13+ stops specializing after about a thousand
    changes): the hundredth installation logs one warning saying how to hold pins instead; blocks
    opened inside a block that stays open install nothing and warn of nothing."""
    from fi_patches.pinning.installation import PINNING, REINSTALLS_WARNED
    from fi_patches.ranks import GUARD

    table = lowlat.table(lowlat.entry(N, K, 5, 8, pins[0]))
    PINNING.installs = GUARD.installs = 0  # what the fixtures installed is not this test's
    with caplog.at_level("WARNING", logger="fi_patches"):
        with fi_patches.pinned_tactics(table):
            for _ in range(2 * REINSTALLS_WARNED):
                with fi_patches.pinned_tactics(table):
                    pass
        assert PINNING.installs == 1
        assert not [r for r in caplog.records if "th time" in r.getMessage()]
        for _ in range(2 * REINSTALLS_WARNED):
            with fi_patches.pinned_tactics(table):
                pass
    warned = [r for r in caplog.records if "th time" in r.getMessage()]
    assert PINNING.installs == 1 + 2 * REINSTALLS_WARNED
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
    assert f"for the {REINSTALLS_WARNED}th time" in warned[0].getMessage()
    assert "Hold pins for the process's life" in warned[0].getMessage()
    assert installed_count() == 0
