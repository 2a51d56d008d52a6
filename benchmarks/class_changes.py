"""What changing FlashInfer's classes costs the calls after: each block that installs or removes
fi_patches' wrappers sets attributes of FlashInfer's tuner and runner classes.

* ``lookup`` (needs FlashInfer): FlashInfer's stock serving lookup (``choose_one`` outside
  tuning, the tests' op on the real tuner) timed call by call right after a block left, against
  the same lookup made steady; medians per phase of the calls after, over many rounds. CPython
  re-specializes the code that reads a changed class, so the first calls after a change cost
  more.
* ``parts`` (needs FlashInfer): the same stock lookup right after each part of what a block
  changes, one at a time (``AutoTuner``'s three methods, ``TunableRunner``'s temporary
  ``__init_subclass__``, the pinned runner class's ``get_valid_tactics``), and after the
  alternative for the tuner's part: the same methods set and deleted on the tuner instance.
* ``tags`` (no FlashInfer): fi_patches' own ``AttributePatch`` applied to and reverted from a
  plain class with three methods, with a call between; how many cycles until CPython gives the
  class no type version tag (from Python 3.13 a class gets at most about a thousand), and what
  a method reading the class's attributes costs before and after. Run it under each Python.

    python benchmarks/class_changes.py lookup [--rounds 30]
    python benchmarks/class_changes.py parts [--rounds 30]
    python3.13 benchmarks/class_changes.py tags
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # fi_patches, tests.toy_op

PHASES = ((0, 5), (5, 20), (20, 60), (60, 120), (120, 300))
"""Calls after the change, ``[start, end)``, each phase reported by its median."""
CYCLES_MAX = 3000


def type_tag(cls: type) -> int:
    """CPython's type version tag of ``cls`` (0: none, and from Python 3.13 a class that used
    up its tags gets none again), read after a lookup, which gives the class a tag where CPython
    still can. Raises ImportError on an interpreter built without its test API."""
    import _testcapi  # type: ignore[import-not-found]

    getattr(cls, "_fi_patches_no_such_attribute", None)
    return int(_testcapi.type_get_version(cls))


@contextlib.contextmanager
def _toy_lookup() -> Iterator[tuple[Callable[[], list[float]], Any, Any]]:
    """The tests' op tuned on FlashInfer's real tuner: yields ``(per_call, table, runner_class)``,
    where ``per_call()`` times its stock serving lookup call by call (:data:`PHASES`, us) and
    ``table`` pins one key of it to ``runner_class``."""
    import flashinfer
    import pytest
    from flashinfer.autotuner import AutoTuner

    import fi_patches
    from tests import toy_op

    monkeypatch = pytest.MonkeyPatch()
    try:
        toy_op.start(monkeypatch, 1)
        with flashinfer.autotune(True):
            toy_op.warm_up()
        tuner, runners, config = AutoTuner.get(), toy_op.runners(), toy_op.config()
        inputs = list(toy_op.operands(8, toy_op.WEIGHTS[0]))
        table = fi_patches.PinTable.from_mapping(
            {
                "meta": {"device": "*", "flashinfer": ""},
                "pin": [
                    {
                        "op": toy_op.OP,
                        "runner": "ToySplitRunner",
                        "shapes": [["rows", toy_op.K], [toy_op.K, toy_op.WEIGHTS[0]]],
                        "min_rows": 5,
                        "max_rows": 8,
                        "tactic": 2,
                    }
                ],
            },
            source="<benchmark>",
        )

        def per_call() -> list[float]:
            out = []
            for _ in range(PHASES[-1][1]):
                start = time.thread_time_ns()
                tuner.choose_one(toy_op.OP, runners, config, inputs)
                out.append((time.thread_time_ns() - start) / 1000)
            return out

        pinned = next(r for r in runners if type(r).__name__ == "ToySplitRunner")
        yield per_call, table, type(pinned)
    finally:
        monkeypatch.undo()


def lookup_phases(rounds: int) -> int:
    import flashinfer

    import fi_patches

    with _toy_lookup() as (per_call, table, _):
        steady: list[list[float]] = []
        after: list[list[float]] = []
        inside: list[list[float]] = []
        for _ in range(rounds):
            steady.append(_phases(per_call()))
            entered, leave = threading.Event(), threading.Event()

            def hold(entered: threading.Event, leave: threading.Event) -> None:
                with fi_patches.pinned_tactics(table):
                    entered.set()
                    leave.wait()

            holder = threading.Thread(target=hold, args=(entered, leave))
            holder.start()
            entered.wait()
            inside.append(_phases(per_call()))  # another thread's block just installed them
            leave.set()
            holder.join()
            after.append(_phases(per_call()))  # its leaving just removed them
    print(
        f"FlashInfer {flashinfer.__version__}, Python {sys.version.split()[0]}: the tests' op's "
        f"serving lookup, thread CPU time per call (us), median over {rounds} rounds per phase"
    )
    _table(
        steady,
        [
            ("stock, steady (the 300 calls before)", steady),
            ("wrappers just installed (another thread)", inside),
            ("stock, wrappers just removed", after),
        ],
    )
    print("(ratios against the steady stock lookup's last phase)")
    return 0


def change_parts(rounds: int) -> int:
    """The stock lookup after each part of what a block does to FlashInfer's classes, one part
    at a time, against the same lookup after no change; and after the alternative for the
    tuner's part: the same three methods set and deleted on the tuner instance, which leaves
    its class as it was."""
    import types

    import flashinfer
    from flashinfer.autotuner import AutoTuner, TunableRunner

    import fi_patches
    from fi_patches.internals import tuner as fi_tuner
    from fi_patches.patching import AttributePatch

    names = [
        i.name for i in (fi_tuner.SEARCH_CACHE, fi_tuner.CHOOSE_ONE, fi_tuner.PROFILE_SINGLE_KERNEL)
    ]
    with _toy_lookup() as (per_call, table, runner_class):
        tuner = AutoTuner.get()

        def block() -> None:
            with fi_patches.pinned_tactics(table):
                pass

        def on_class() -> None:
            patches = [AttributePatch(AutoTuner, name, _pass_through) for name in names]
            for patch in patches:
                patch.apply()
            for patch in reversed(patches):
                patch.revert()

        def on_instance() -> None:
            for name in names:
                vars(tuner)[name] = types.MethodType(
                    _pass_through(vars(AutoTuner)[name], None), tuner
                )
            for name in names:
                del vars(tuner)[name]

        def subclass_hook() -> None:
            type.__setattr__(TunableRunner, "__init_subclass__", classmethod(lambda cls: None))
            type.__delattr__(TunableRunner, "__init_subclass__")

        def runner_method() -> None:
            patch = AttributePatch(runner_class, "get_valid_tactics", _pass_through)
            patch.apply()
            patch.revert()

        parts: list[tuple[str, Callable[[], None]]] = [
            ("no change", lambda: None),
            ("a block entered and left (all of it)", block),
            ("AutoTuner: 3 methods set, restored", on_class),
            ("its instance instead: 3 set, deleted", on_instance),
            ("TunableRunner.__init_subclass__", subclass_hook),
            ("the pinned runner class's method", runner_method),
        ]
        rows: dict[str, list[list[float]]] = {name: [] for name, _ in parts}
        for _ in range(rounds):
            for name, change in parts:
                per_call()  # steady before the change
                change()
                rows[name].append(_phases(per_call()))
    print(
        f"FlashInfer {flashinfer.__version__}, Python {sys.version.split()[0]}: the tests' op's "
        f"stock serving lookup right after each change, thread CPU time per call (us), median "
        f"over {rounds} rounds per phase"
    )
    _table(rows["no change"], list(rows.items()))
    print("(ratios against the lookup after no change, last phase)")
    return 0


def _table(base_rows: list[list[float]], named: list[tuple[str, list[list[float]]]]) -> None:
    header = "".join(f"{f'calls {a}-{b}':>14}" for a, b in PHASES)
    print(f"{'':<44}{header}")
    base = [statistics.median(col) for col in zip(*base_rows, strict=True)]
    for name, rows in named:
        cols = [statistics.median(col) for col in zip(*rows, strict=True)]
        cells = "".join(f"{c:>8.2f} {c / base[-1]:4.2f}x" for c in cols)
        print(f"{name:<44}{cells}")


def _pass_through(original: Any, gate: Any) -> Any:
    """A replacement factory of fi_patches' form (``make(original, gate)``) whose wrapper only
    calls the original: what changing the class costs, without any wrapper's own work."""

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def bare_search_cache() -> Iterator[None]:
    """FlashInfer's ``AutoTuner.search_cache`` behind a wrapper that only calls it, with its
    parameters: the floor any wrapper of FlashInfer's lookup costs (the serving benchmarks'
    floor rows). Restored on exit."""
    from flashinfer.autotuner import AutoTuner

    original = vars(AutoTuner)["search_cache"]

    def search_cache(
        self: Any,
        custom_op: Any,
        runners: Any,
        input_shapes: Any,
        tuning_config: Any,
        inputs: Any = None,
    ) -> Any:
        return original(self, custom_op, runners, input_shapes, tuning_config, inputs)

    AutoTuner.search_cache = search_cache  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        AutoTuner.search_cache = original  # type: ignore[method-assign, assignment]


@contextlib.contextmanager
def floor_valid_tactics(runner_class: Any, position: int, shapes: frozenset[Any]) -> Iterator[None]:
    """``runner_class.get_valid_tactics`` behind the least a wrapper that finds a direct call's
    pin does: it takes FlashInfer's parameters, tests ``inputs[position].shape`` against
    ``shapes`` (the test fi_patches' probe makes), and calls FlashInfer's method (the
    ``get_valid_tactics`` floor rows of both pinning benchmarks). Install it while no block is
    open; the class is as it was on exit."""
    own = vars(runner_class).get("get_valid_tactics")
    stock_method = runner_class.get_valid_tactics

    def get_valid_tactics(self: Any, inputs: Any, profile: Any) -> Any:
        if inputs[position].shape in shapes:
            pass
        return stock_method(self, inputs, profile)

    runner_class.get_valid_tactics = get_valid_tactics
    try:
        yield
    finally:
        if own is None:  # inherited: leave the class as it was
            del runner_class.get_valid_tactics
        else:
            runner_class.get_valid_tactics = own


def _phases(values: list[float]) -> list[float]:
    return [statistics.median(values[a:b]) for a, b in PHASES]


def version_tags() -> int:
    from fi_patches.patching import AttributePatch

    try:
        type_tag(object)
    except ImportError:
        print(f"Python {sys.version.split()[0]} has no _testcapi: the tags cannot be read")
        return 0

    class Tuner:
        def __init__(self) -> None:
            self.tuning, self.cache, self.a, self.b = False, {1: 0}, 1, 2

        def choose_one(self, key: int) -> int:
            total = 0
            for _ in range(5):
                total += self.search_cache(key)
            return total

        def search_cache(self, key: int) -> int:
            if self.tuning:
                return 0
            return self.cache.get(key, 0) + self.a + self.b

        def profile(self) -> None:
            return None

    tuner = Tuner()

    def per_call_ns() -> float:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(100_000):
                tuner.choose_one(1)
            best = min(best, time.perf_counter() - start)
        return best / 100_000 * 1e9

    before = per_call_ns()
    patches = [
        AttributePatch(Tuner, n, _pass_through) for n in ("choose_one", "search_cache", "profile")
    ]
    gone = None
    for cycle in range(1, CYCLES_MAX + 1):
        for patch in patches:
            patch.apply()
        tuner.choose_one(1)
        for patch in patches:
            patch.revert()
        tuner.choose_one(1)
        if gone is None and type_tag(Tuner) == 0:
            gone = cycle
    after = per_call_ns()
    print(
        f"Python {sys.version.split()[0]}: {CYCLES_MAX} cycles of fi_patches' AttributePatch "
        "(3 methods applied, a call, reverted, a call) on a plain class"
    )
    print(
        "type version tag gone after "
        + (f"{gone} cycles" if gone is not None else f"none of {CYCLES_MAX} cycles (still valid)")
    )
    print(
        f"a method reading the class's attributes: {before:.0f} ns before, {after:.0f} ns after "
        f"({after / before:.2f}x)"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("lookup", "parts", "tags"))
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    if args.what == "tags":
        return version_tags()
    return (lookup_phases if args.what == "lookup" else change_parts)(args.rounds)


if __name__ == "__main__":
    raise SystemExit(main())
