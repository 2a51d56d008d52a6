"""Ops of a chain: what the harness needs from one GEMM (its tactics in the enumerator's order,
device inputs, a launch), and the adapter for any runner with FlashInfer's two methods
``get_valid_tactics(inputs, profile)`` and ``forward(inputs, tactic=...)``.

The FlashInfer runners themselves (low-latency, cute-dsl, fi_patches' wide runner) are adapted
in :mod:`fi_patches.chain.mxfp8_ops`; this module needs neither torch nor FlashInfer, so the
harness runs with torch stand-ins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from fi_patches.pins.keys import as_tactic


@runtime_checkable
class Op(Protocol):
    """One GEMM of a chain."""

    name: str

    def tactics(self, rows: int) -> list[Any]:
        """The tactics offered at ``rows`` rows, in the runner's own (enumerator) order."""
        ...

    def inputs(self, rows: int) -> Any:
        """Inputs on the device for ``rows`` rows, built once and reused by every launch."""
        ...

    def launch(self, inputs: Any, tactic: Any) -> None:
        """Enqueue the GEMM with ``tactic`` on the current stream (captured into a graph)."""
        ...


class RunnerOp:
    """An op served by ``runner``: any object with ``get_valid_tactics(inputs, profile)`` and
    ``forward(inputs, tactic=...)``, as FlashInfer's ``TunableRunner`` has them.

    ``make_inputs(rows)`` builds launch inputs on the device; ``listing_inputs(rows)`` (default:
    the same) builds what ``get_valid_tactics`` is asked with, so a FlashInfer runner can list
    its tactics from shape-only tensors on a machine that cannot launch it.
    """

    def __init__(
        self,
        name: str,
        runner: Any,
        make_inputs: Callable[[int], Any],
        listing_inputs: Callable[[int], Any] | None = None,
    ) -> None:
        self.name = name
        self.runner = runner
        self._make_inputs = make_inputs
        self._listing_inputs = listing_inputs or make_inputs
        self._inputs: dict[int, Any] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {type(self.runner).__name__})"

    def tactics(self, rows: int) -> list[Any]:
        offered = self.runner.get_valid_tactics(self._listing_inputs(rows), None)
        return [as_tactic(t) for t in offered]

    def inputs(self, rows: int) -> Any:
        if rows not in self._inputs:
            self._inputs[rows] = self._make_inputs(rows)
        return self._inputs[rows]

    def launch(self, inputs: Any, tactic: Any) -> None:
        self.runner.forward(inputs, tactic=tactic)
