"""The low-latency kernel's tactic tuple, named."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Tactic(NamedTuple):
    """``(cta_k, ab_stages, sfb_tmem_stages, split_k)``, as FlashInfer's ``autotune_tactics``
    lists them; equal to the plain tuple."""

    cta_k: int
    ab_stages: int
    sfb_tmem_stages: int
    split_k: int

    def __str__(self) -> str:
        return f"({self.cta_k}, {self.ab_stages}, {self.sfb_tmem_stages}, {self.split_k})"


def as_tactic(value: Sequence[int]) -> Tactic:
    """``value`` as a :class:`Tactic`; ValueError unless it is four integers."""
    items = tuple(value)
    if len(items) != 4 or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ValueError(
            f"a tactic is four integers (cta_k, ab_stages, sfb_tmem_stages, split_k), got {value!r}"
        )
    return Tactic(*items)
