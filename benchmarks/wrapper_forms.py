"""Per-call cost of the two forms of a reversible wrapper fi_patches installs, on a class
method called through an instance as FlashInfer's tuner calls ``search_cache``: a plain function
with ``__wrapped__`` set (``functools.wraps``: the engine's hot-path wrappers) and a
``wrapt.FunctionWrapper`` (the rank guard's and the tuning detector's), each a pass-through
checking its patch's gate, against the bare method. Thread CPU time per call, best and median
of many rounds.
    python -O benchmarks/wrapper_forms.py [--repeat 31] [--number 20000]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from typing import Any


class _Gate:
    active = True


def _forms() -> dict[str, type]:
    import wrapt

    gate = _Gate()

    def stock(
        self: Any, op: Any, runners: Any, shapes: Any, config: Any, inputs: Any = None
    ) -> Any:
        return None

    @functools.wraps(stock)
    def plain(
        self: Any, op: Any, runners: Any, shapes: Any, config: Any, inputs: Any = None
    ) -> Any:
        if not gate.active:
            return stock(self, op, runners, shapes, config, inputs)
        return stock(self, op, runners, shapes, config, inputs)

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        return wrapped(*args, **kwargs)

    proxy = wrapt.FunctionWrapper(stock, wrapper, enabled=lambda: gate.active)
    return {
        "bare method (no wrapper)": type("Bare", (), {"call": stock}),
        "plain function, __wrapped__": type("Plain", (), {"call": plain}),
        "wrapt.FunctionWrapper": type("Proxied", (), {"call": proxy}),
    }


def _per_call_ns(cls: type, number: int, repeat: int) -> tuple[float, float]:
    instance = cls()
    rounds = []
    for _ in range(repeat):
        start = time.thread_time_ns()
        for _ in range(number):
            instance.call("op", (), (), None, None)
        rounds.append((time.thread_time_ns() - start) / number)
    return min(rounds), statistics.median(rounds)


def main() -> None:
    from importlib import metadata

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=31)
    parser.add_argument("--number", type=int, default=20000)
    options = parser.parse_args()
    print(f"wrapt {metadata.version('wrapt')}, CPython {sys.version.split()[0]}; ns per call")
    print(f"{'form':32s} {'best':>8s} {'median':>8s}")
    for name, cls in _forms().items():
        best, median = _per_call_ns(cls, options.number, options.repeat)
        print(f"{name:32s} {best:8.1f} {median:8.1f}")


if __name__ == "__main__":
    main()
