"""SIMULATION, test-only: with this directory on ``PYTHONPATH`` and
``FI_PATCHES_SIMULATE_DEVICE_PROPERTIES=1``, fake the CUDA device properties FlashInfer reads while
it imports (see ``simulated_device.py``). Otherwise it only hands over to the ``sitecustomize``
it shadows, if any."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _chain_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this file shadows, if any, as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the shadowed one failing must not break the interpreter
        print(f"tests/simulated_import: the next sitecustomize failed: {exc!r}", file=sys.stderr)


if os.environ.get("FI_PATCHES_SIMULATE_DEVICE_PROPERTIES", "").strip() == "1":
    import simulated_device

    simulated_device.install()
_chain_next_sitecustomize()
