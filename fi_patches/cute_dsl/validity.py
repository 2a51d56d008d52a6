"""Whether the cute-dsl runner would run a tactic as given for an exact problem.

From 0.7.1 the runner silently replaces a split-K tactic the split-K kernel cannot run at this
M, and any narrow tile outside its envelope, by its fallback. A pin must run as pinned or not at
all, so this asks the runner's own list and FlashInfer's own predicates before launching."""

from __future__ import annotations

from typing import Any

from fi_patches.internals import flashinfer as fi


def why_not_runnable(runner: Any, inputs: list[Any], tactic: Any) -> str | None:
    """None when ``runner`` runs ``tactic`` unchanged on ``inputs``, else the reason. The
    tactic is looked up in the runner's stock list, whatever pins are active here."""
    from fi_patches.internals.cute_dsl import numeric_type
    from fi_patches.pinning import stack
    from fi_patches.pins.keys import as_tactic

    with stack.isolated():  # the stock list, not one narrowed by a block open here
        offered = [as_tactic(t) for t in runner.get_valid_tactics(inputs, None)]
    if tactic not in offered:
        return f"the runner does not offer it here (it offers {len(offered)} tactics)"
    a, b, out = inputs[0], inputs[1], inputs[5]
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    tiler, _, swap_ab, _, split_k = tactic
    if split_k > 1:
        split = fi.split_k_kernel()
        if not out.is_contiguous():
            return "split-K needs a contiguous output"
        if not split.is_valid_tactic(m, k, numeric_type("Float8E4M3FN"), split_k):
            return f"FlashInfer's split-K kernel cannot split K={k} {split_k} ways at M={m}"
        if tuple(split.mma_tiler_mn_for_m(m)) != tiler:
            return f"split-K at M={m} runs tile {split.mma_tiler_mn_for_m(m)}, not {tiler}"
    narrow_ok = fi.narrow_tile_ok()
    if narrow_ok is not None and not narrow_ok(tiler[1], m if swap_ab else n):
        return f"tile N={tiler[1]} is outside FlashInfer's narrow-tile envelope at M={m}"
    return None
