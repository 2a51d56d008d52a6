"""What one serving lookup runs of fi_patches (issue 30): the functions, and the C functions
they call, that a warm ``choose_one`` outside tuning reaches in fi_patches' code, seen through
``sys.setprofile`` against FlashInfer's real tuner, in every serving mode and in a thread
without pins while another holds a block. Timings live in ``benchmarks/pinning_overhead.py``;
this is their deterministic side: each function a serving call runs costs about a tenth of a
microsecond of FlashInfer's 7 us lookup, so what runs is budgeted here, case by case, and a
change that adds work to the hot path fails here before a benchmark shows it.

Budgets name functions, not counts of FlashInfer's: FlashInfer's own work is compared with the
same lookup made stock (all of it where FlashInfer answers, none of its cache lookup where the
pin does)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fi_patches
from fi_patches.pinning.stack import current_index
from fi_patches.pins import PinTable
from tests import lowlat, toy_op, toy_pins
from tests.conftest import require_feature
from tests.toy_pins import ROWS, SERVING_MODES, N

OURS = str(Path(fi_patches.__file__).resolve().parent)
WRAPPERS = {"lean", "search_cache"}
"""fi_patches' wrapper a serving lookup passes through: ``search_cache``'s (``lean``;
``search_cache`` is the shell a release whose method takes other parameters gets, which hands
the call to ``lean``). ``choose_one``'s acts only while tuning, and is installed only then."""
PIN_ANSWER = {"_served", "_same", "_kinds"}
"""What answering a remembered pinned key adds: the row's check that it was decided for these
runners and inputs of these kinds."""
REACH_TEST = {"len"}
"""The C calls of an op's reach test past its one read of the op's reach (a subscript, not a
call): the call's input count."""
CONTEXT_READ = "ContextVar.get"
"""The one C call a lookup makes to read its context, while some block is open somewhere."""
INLINED = {"<listcomp>", "<dictcomp>", "<setcomp>"}
"""Comprehensions: frames of their own before Python 3.12, inlined since (PEP 709)."""


class Work:
    """What a call ran: fi_patches' functions and the C functions they called, FlashInfer's
    functions (by file and name), each with how often."""

    def __init__(self) -> None:
        self.ours: Counter[str] = Counter()
        self.ours_c: Counter[str] = Counter()
        self.flashinfer: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"ours={dict(self.ours)} ours_c={dict(self.ours_c)}"


def _work(call: Callable[[], Any]) -> Work:
    """What ``call`` runs (after two untimed calls: a lookup is decided once, then remembered)."""
    call()
    call()
    work = Work()

    def profile(frame: Any, event: str, arg: Any) -> None:
        path = frame.f_code.co_filename
        if event == "call":
            name = frame.f_code.co_name
            if path.startswith(OURS) and name not in INLINED:
                work.ours[name] += 1
            elif "flashinfer" in path:
                work.flashinfer[f"{Path(path).name}:{name}"] += 1
        elif event == "c_call" and path.startswith(OURS):
            work.ours_c[getattr(arg, "__qualname__", repr(arg))] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return work


def _lookups(
    engine: Any, monkeypatch: pytest.MonkeyPatch, any_op: bool = False
) -> tuple[Any, dict[str, Callable[[], Any]]]:
    """A table pinning one key of the toy op (not to FlashInfer's cached winner), with a
    ``[[low_latency]]`` entry beside it if ``any_op`` (a section that serves any op), and the
    serving lookups: that key, another weight's key of the same op, and an op no entry pins."""
    from flashinfer.autotuner import AutoTuner

    winners = toy_pins.warmed(engine, monkeypatch)
    table = toy_pins.pin_of(*toy_pins.not_cached(winners))
    if any_op:
        require_feature("pinned_tactics")
        n, k = lowlat.SHAPE
        section = lowlat.table(lowlat.entry(n, k, 1, 8, lowlat.non_split_alternative(n, k, 8)))
        table = PinTable.from_mapping(
            {**section.to_mapping(), "pin": table.to_mapping()["pin"]}, source="<test>"
        )
    tuner, config, runners = AutoTuner.get(), toy_op.config(), toy_op.runners()
    pinned = list(toy_op.operands(ROWS, N))
    other = list(toy_op.operands(ROWS, toy_op.WEIGHTS[1]))
    lookups = {
        "pinned key": lambda: tuner.choose_one(toy_op.OP, runners, config, pinned),
        "unpinned key": lambda: tuner.choose_one(toy_op.OP, runners, config, other),
        "op no entry pins": lambda: tuner.choose_one(
            f"{toy_op.OP}_unpinned", runners, config, pinned
        ),
    }
    return table, lookups


@pytest.mark.parametrize("any_op", [False, True], ids=["pin", "pin and low_latency"])
@pytest.mark.parametrize("mode", SERVING_MODES)
def test_a_serving_lookup_runs_only_its_budget_of_fi_patches(engine, monkeypatch, mode, any_op):
    """With ``any_op``, a ``[[low_latency]]`` section in force serves every op: an op no entry
    pins is then told apart by its reach test alone, never by a Python-level test of the op."""
    table, lookups = _lookups(engine, monkeypatch, any_op)
    stock = {case: _work(lookup) for case, lookup in lookups.items()}
    assert not any(work.ours for work in stock.values())  # nothing of ours is installed
    context = {CONTEXT_READ} if mode != "process" else set()  # a block is open: read it
    with toy_pins.serving(table, mode):
        index = current_index()
        assert index is not None and (f"{toy_op.OP}_unpinned" in index.served) is any_op
        found = {case: _work(lookup) for case, lookup in lookups.items()}

    # A pinned key: the pin answers from the remembered row; FlashInfer's lookup never runs.
    pinned = found["pinned key"]
    assert set(pinned.ours) <= WRAPPERS | PIN_ANSWER, pinned
    assert not any(name.endswith(":search_cache") for name in pinned.flashinfer), pinned
    # The unpinned key of a pinned op (another weight): the op's reach test, one read of a
    # dict and one input's shape, tells no entry could pin it, so the memo (whose key hashes
    # every input's shape) is not read; then FlashInfer's own lookup, exactly as stock makes it.
    unpinned = found["unpinned key"]
    assert set(unpinned.ours) <= WRAPPERS, unpinned
    assert set(unpinned.ours_c) <= context | REACH_TEST, unpinned
    assert unpinned.flashinfer == stock["unpinned key"].flashinfer
    # An op no entry pins: straight to FlashInfer, not even the row's read (where a section
    # serves every op, its reach test rules the call out).
    elsewhere = found["op no entry pins"]
    assert set(elsewhere.ours) <= WRAPPERS, elsewhere
    assert set(elsewhere.ours_c) <= context | (REACH_TEST if any_op else set()), elsewhere
    assert elsewhere.flashinfer == stock["op no entry pins"].flashinfer


def test_a_thread_without_pins_runs_the_wrappers_and_one_context_read(engine, monkeypatch):
    """While another thread holds a block (the wrappers installed), a lookup here passes through
    the wrappers, reads its context once, and runs FlashInfer's lookup as stock does."""
    table, lookups = _lookups(engine, monkeypatch)
    stock = {case: _work(lookup) for case, lookup in lookups.items()}
    with toy_pins.held_in_another_thread(table):
        found = {case: _work(lookup) for case, lookup in lookups.items()}
    for case, work in found.items():
        assert set(work.ours) <= WRAPPERS and "lean" in work.ours, (case, work)
        assert set(work.ours_c) == {CONTEXT_READ} and work.ours_c[CONTEXT_READ] == 1, (case, work)
        assert work.flashinfer == stock[case].flashinfer, case
