"""Run ptxas on a wide kernel's PTX and read its resource report (``-v``).

The DSL emits PTX 9.x that older toolkits reject; PyPI's ``nvidia-cuda-nvcc==13.5.37`` (the
``resources`` extra) ships a ptxas that accepts it, at ``nvidia/cu13/bin/ptxas``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fi_patches import _env

PTXAS_ENV = _env.PTXAS.name
PACKAGE_RELATIVE = ("cu13", "bin", "ptxas")

_FUNCTION = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
_SMEM = re.compile(r"(\d+) bytes smem")
_VERSION = re.compile(r"release ([\d.]+), V([\d.]+)")


class PtxasError(RuntimeError):
    """ptxas is missing or rejected the PTX."""


@dataclass(frozen=True)
class PtxasReport:
    """ptxas ``-v`` figures for one kernel."""

    kernel: str
    arch: str
    registers: int
    barriers: int | None
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    static_smem_bytes: int
    ptxas_version: str | None


def find_ptxas() -> Path | None:
    """``$FI_PATCHES_PTXAS``, else the ptxas of an installed ``nvidia-cuda-nvcc`` wheel, else
    None (the system ptxas is not used: it is usually too old for the DSL's PTX)."""
    override = _env.get(_env.PTXAS)
    if override:
        return Path(override) if Path(override).is_file() else None
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        candidate = Path(root).joinpath(*PACKAGE_RELATIVE)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def ptxas_version(ptxas: Path) -> str | None:
    """``13.5.37`` for ``ptxas --version`` of that release."""
    result = subprocess.run([str(ptxas), "--version"], capture_output=True, text=True, check=False)
    match = _VERSION.search(result.stdout)
    return match.group(2) if match else None


def parse_verbose(output: str, arch: str, version: str | None = None) -> list[PtxasReport]:
    """The per-kernel reports in ptxas ``-v`` output."""
    reports = []
    chunks = _FUNCTION.split(output)
    for name, chunk in zip(chunks[1::2], chunks[2::2], strict=True):
        frame = _FRAME.search(chunk)
        used = _USED.search(chunk)
        if frame is None or used is None:
            continue
        smem = _SMEM.search(chunk)
        reports.append(
            PtxasReport(
                kernel=name,
                arch=arch,
                registers=int(used.group(1)),
                barriers=int(used.group(2)) if used.group(2) else None,
                stack_frame_bytes=int(frame.group(1)),
                spill_store_bytes=int(frame.group(2)),
                spill_load_bytes=int(frame.group(3)),
                static_smem_bytes=int(smem.group(1)) if smem else 0,
                ptxas_version=version,
            )
        )
    return reports


def run_ptxas(ptx: str, arch: str, *, ptxas: Path | None = None) -> tuple[list[PtxasReport], bytes]:
    """Assemble ``ptx`` for ``arch`` with ``-v``: the reports and the cubin ptxas wrote."""
    tool = ptxas or find_ptxas()
    if tool is None:
        raise PtxasError(
            "ptxas 13.5+ was not found: install fi_patches[resources] (nvidia-cuda-nvcc==13.5.37) "
            f"or set {PTXAS_ENV}"
        )
    workdir = tempfile.mkdtemp(prefix="fi_patches_ptxas_")
    try:
        source = Path(workdir, "kernel.ptx")
        target = Path(workdir, "kernel.cubin")
        source.write_text(ptx)
        result = subprocess.run(
            [str(tool), f"-arch={arch}", "-v", str(source), "-o", str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise PtxasError(f"ptxas -arch={arch} failed ({result.returncode}): {result.stderr}")
        output = result.stdout + result.stderr
        return parse_verbose(output, arch, ptxas_version(tool)), target.read_bytes()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
