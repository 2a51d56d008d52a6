"""The drift suite: every internal declared in ``fi_patches/internals/`` is broken in turn, each
way ``tests.drift.cases.mutations`` says fits it, in the real installed FlashInfer, and
fi_patches must turn the features that need it off with a reason naming it and otherwise stay
out of FlashInfer's way.

* ``cases.py``: the cases, computed from the boundary; ``mutate.py``: the mutations;
* ``zygote.py`` / ``pool.py``: two processes import torch and FlashInfer once and fork one
  child per case (with a timeout); ``pins.py`` makes the pin table the cases use;
* ``child.py``: what a case does (simulate sm_103, break the internal, run doctor, the blocks,
  ``fi_patches.auto`` and ``mxfp8.mm``) and records; ``snapshot.py``: FlashInfer's namespaces by
  identity; ``verdict.py``: the rules a case's record must meet, against the baseline;
* ``conftest.py``: one run per session and the coverage line
  (``drift: <n> internals, <m> mutations, <m> cases, all clean``).

``python -m pytest tests/drift -k autotune_tactics-removed`` runs one case;
``python -m tests.drift --inline autotune_tactics-removed`` runs it in this process.
"""
