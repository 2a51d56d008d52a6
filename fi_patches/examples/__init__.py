"""Small real inputs for trying ``pins record``, ``pins diff`` and ``tune --timings`` without a
Blackwell GPU (see the walkthrough in docs/pins-cli.md). :data:`ROOT` holds:

* ``rank0.json``, ``rank1.json``: v1 tuner cache files (``AutoTuner.save_configs``) and
  ``tuner_store/``: a v2 store (``autotune_v2``), written by FlashInfer 0.7.4's own tuner for
  the three projections of ``deepseek_v3_tp4`` on CPU, with the device and the kernel timing
  simulated (``tools/examples.py``; rank1 with a timing that prefers other split-K tactics);
* ``deepseek_v3_tp4.timings.json``: measurements of the shipped chain as ``tune
  --save-timings`` records them, from a cost model instead of a GPU.

None of these numbers was measured on hardware."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
"""The folder of the shipped example files."""
