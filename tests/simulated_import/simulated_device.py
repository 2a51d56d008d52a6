"""SIMULATION, test-only: let ``import flashinfer`` succeed on CPU-only torch.

FlashInfer 0.6.x-0.7.0.post1 read the CUDA device while their modules are imported:
``gdn_kernels/gdn_decode_bf16_state.py`` runs ``torch.cuda.get_device_properties(0)
.multi_processor_count`` and ``torch.cuda.get_device_capability(0)`` at module level (0.7.0
lines 2705 and 2709; 0.6.18.post1 lines 2703 and 2707; no other import-time read was found by
importing with these two faked), and CPU-only torch raises there. :func:`install` answers those
two calls with a fake sm_103 device (GB300-like: 148 SMs, compute capability 10.3), but only
while a ``flashinfer`` module body executes. After the import ``torch.cuda`` is untouched, so
anything that queries the device at run time still finds none.

Two ways in, both explicit:

* ``PYTHONPATH=tests/simulated_import FI_PATCHES_SIMULATE_DEVICE_PROPERTIES=1`` (this directory's
  ``sitecustomize.py``), for one process tree that keeps the environment;
* a one-line ``.pth`` the compat matrix writes into a cell's venv (see ``compat/cell.py``,
  :func:`pth_line`), so every Python of that venv is simulated, including children started with
  a scrubbed environment (tests/test_auto.py drops ``FI_PATCHES_*`` and ``PYTHONPATH``).

Nothing in ``fi_patches`` imports this module.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

ENV = "FI_PATCHES_SIMULATE_DEVICE_PROPERTIES"
PACKAGE = "flashinfer"
MODULE = "fi_patches_simulated_device"
MARKER = "fi_patches_simulated_device"

# What the fake device reports; ``major``/``minor`` follow FI_PATCHES_DEVICE's default target.
SIMULATED = {
    "name": "SIMULATED sm_103 (fi_patches tests/simulated_import)",
    "major": 10,
    "minor": 3,
    "multi_processor_count": 148,
    "total_memory": 288 * 1024**3,
    "L2_cache_size": 126 * 1024**2,
    "shared_memory_per_block": 48 * 1024,
    "shared_memory_per_block_optin": 232448,
    "shared_memory_per_multiprocessor": 233472,
    "regs_per_multiprocessor": 65536,
    "max_threads_per_multi_processor": 2048,
    "warp_size": 32,
    "is_integrated": False,
    "is_multi_gpu_board": False,
    "gcnArchName": "",
    "uuid": "00000000-0000-0000-0000-000000000103",
    "pci_bus_id": 0,
    "pci_device_id": 0,
    "pci_domain_id": 0,
}


class SimulatedDeviceProperties(types.SimpleNamespace):
    """A stand-in for ``torch.cuda._CudaDeviceProperties`` of the simulated sm_103 device."""

    def __repr__(self) -> str:
        return (
            f"SimulatedDeviceProperties(name={self.name!r}, major={self.major}, minor={self.minor})"
        )


def fake_get_device_properties(device: Any = None) -> SimulatedDeviceProperties:
    """What ``torch.cuda.get_device_properties`` answers while a FlashInfer module imports."""
    return SimulatedDeviceProperties(**SIMULATED)


def fake_get_device_capability(device: Any = None) -> tuple[int, int]:
    """What ``torch.cuda.get_device_capability`` answers while a FlashInfer module imports."""
    return SIMULATED["major"], SIMULATED["minor"]


# The torch.cuda functions replaced during an import, and their stand-ins.
REPLACED = {
    "get_device_properties": fake_get_device_properties,
    "get_device_capability": fake_get_device_capability,
}

_lock = threading.RLock()
_depth = 0
_saved: dict[str, Any] = {}


@contextlib.contextmanager
def simulated_device() -> Iterator[None]:
    """Replace the ``torch.cuda`` reads for the duration (re-entrant: nested imports share it)."""
    global _depth
    with _lock:
        if _depth == 0:
            import torch.cuda

            for name, fake in REPLACED.items():
                _saved[name] = getattr(torch.cuda, name)
                setattr(torch.cuda, name, fake)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                import torch.cuda

                for name, original in _saved.items():
                    setattr(torch.cuda, name, original)
                _saved.clear()


class _SimulatingLoader(importlib.abc.Loader):
    """Wraps a FlashInfer module's loader so its body executes under :func:`simulated_device`."""

    def __init__(self, wrapped: importlib.abc.Loader) -> None:
        self._wrapped = wrapped

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._wrapped.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        with simulated_device():
            self._wrapped.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, get_source, is_package, ...
        return getattr(self._wrapped, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds FlashInfer's modules as usual, then wraps their loaders."""

    fi_patches_simulated_device = True  # MARKER: recognisable across copies of this module

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _SimulatingLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once per process, however often it is loaded)."""
    if not any(getattr(f, MARKER, False) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def installed() -> bool:
    """Whether this process simulates the device properties for FlashInfer's imports."""
    return any(getattr(f, MARKER, False) for f in sys.meta_path)


def pth_line(path: str | None = None) -> str:
    """A ``.pth`` line that loads this file by path and installs the simulation."""
    path = os.path.abspath(path or __file__)
    return (
        "import importlib.util as _u; "
        f"_s = _u.spec_from_file_location({MODULE!r}, {path!r}); "
        "_m = _u.module_from_spec(_s); _s.loader.exec_module(_m); _m.install()\n"
    )
