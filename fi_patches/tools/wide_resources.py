"""A compiled wide kernel's resources: registers, spills and stack from ptxas (or the cubin), and
the dynamic shared memory its launch requests, read from the lowered host IR.

:func:`read_cubin` reads a CUDA cubin (ELF) without NVIDIA tools: its SM arch and the per-kernel
resource attributes ptxas records in ``.nv.info`` (registers, stack frame, stack sizes).

``.nv.info`` is a list of attributes: format byte, attribute byte, then a 16-bit value
(formats 1-3) or a 16-bit size and that many payload bytes (format 4, whose per-kernel payload
starts with the kernel's symbol index).

:func:`run_ptxas` runs ptxas on a wide kernel's PTX and reads its resource report (``-v``).

The DSL emits PTX 9.x that older toolkits reject; PyPI's ``nvidia-cuda-nvcc==13.5.37`` (the
``resources`` extra) ships a ptxas that accepts it, at ``nvidia/cu13/bin/ptxas``.

The precompile CLI's library: what to build for a set of weight shapes
(:func:`precompile_requests`), and compiling them with their resource reports
(:func:`precompile`). Why a ``[[wide]]`` pin can never run is
:func:`fi_patches.wide.tactics.wide_pin_reason` (pin-table validation, a runtime check).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fi_patches import _env
from fi_patches._logging import get_logger
from fi_patches.wide.budget import smem_bytes
from fi_patches.wide.kernel import WideKernel, compile_wide
from fi_patches.wide.tactics import Tactic, choose_tactic, wide_tactics

_LAUNCH_CONFIG = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"
"""LLVM type of ``cudaLaunchConfig_t``: grid, block, dynamicSmemBytes, stream, attrs, count."""

_DYNAMIC_SMEM_FIELD = 2
_FUNC = re.compile(r"^\s*llvm\.func\b", re.MULTILINE)


def _functions(ir: str) -> list[str]:
    starts = [m.start() for m in _FUNC.finditer(ir)]
    return [ir[a:b] for a, b in zip(starts, [*starts[1:], len(ir)], strict=True)]


def launch_dynamic_smem(ir: str) -> list[int]:
    """Dynamic shared-memory bytes of every kernel launch in lowered host IR ``ir`` (``str`` of
    a compiled function's ``ir_module``), in order; a launch whose value is not a constant is
    left out."""
    found: list[int] = []
    for body in _functions(ir):
        for config in re.findall(
            rf"(%\d+) = llvm\.alloca %\d+ x {re.escape(_LAUNCH_CONFIG)}", body
        ):
            field_ptrs = re.findall(
                rf"(%\d+) = llvm\.getelementptr {re.escape(config)}\[0, {_DYNAMIC_SMEM_FIELD}\]",
                body,
            )
            for field_ptr in field_ptrs:
                stored = re.search(rf"llvm\.store (%\d+), {re.escape(field_ptr)} : i64,", body)
                if stored is None:
                    continue
                constant = re.search(
                    rf"{re.escape(stored.group(1))} = llvm\.mlir\.constant\((\d+) : i64\)", body
                )
                if constant is not None:
                    found.append(int(constant.group(1)))
    return found


logger = get_logger(__name__)


@dataclass(frozen=True)
class KernelResources:
    """Resource figures of one compiled wide kernel; None where the source was unavailable."""

    tile: int
    tactic: Tactic
    arch: str
    kernel_name: str | None
    registers: int | None
    """From ptxas when it ran, else from the cubin's REGCOUNT (the two agree)."""
    stack_frame_bytes: int | None
    spill_store_bytes: int | None
    """ptxas only (the cubin does not record spills)."""
    spill_load_bytes: int | None
    static_smem_bytes: int | None
    launch_dynamic_smem_bytes: int | None
    """What the launch requests (from the host code): the number checked against capacity."""
    formula_smem_bytes: int
    """:func:`fi_patches.wide.budget.smem_bytes` for the same configuration."""
    cubin_sm: int | None
    cubin_registers: int | None
    cubin_frame_size: int | None
    ptxas_version: str | None
    compile_seconds: float

    @property
    def spills(self) -> bool | None:
        if self.spill_store_bytes is None or self.spill_load_bytes is None:
            return None
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


def _ptxas_report(kernel: WideKernel, use_ptxas: bool | None) -> PtxasReport | None:
    if use_ptxas is False or kernel.ptx is None:
        if use_ptxas and kernel.ptx is None:
            raise PtxasError("the kernel was compiled without keeping its PTX")
        return None
    if use_ptxas is None and find_ptxas() is None:
        return None
    reports, _ = run_ptxas(kernel.ptx, kernel.arch)
    return reports[0] if reports else None


def kernel_resources(kernel: WideKernel, *, use_ptxas: bool | None = None) -> KernelResources:
    """Resources of ``kernel``; ``use_ptxas`` None runs ptxas when it is installed, True
    requires it (PtxasError when missing), False never runs it."""
    report = _ptxas_report(kernel, use_ptxas)
    cubin_kernel = None
    cubin_sm = None
    if kernel.cubin is not None:
        info = read_cubin(kernel.cubin)
        cubin_sm = info.sm
        cubin_kernel = next(iter(info.kernels.values()), None)
    launches = launch_dynamic_smem(kernel.host_ir())
    if len(launches) != 1:
        logger.debug("expected one launch in the host code of %s, found %s", kernel.key, launches)
    cubin_regs = cubin_kernel.registers if cubin_kernel else None
    cubin_frame = cubin_kernel.frame_size if cubin_kernel else None
    return KernelResources(
        tile=kernel.tile,
        tactic=kernel.tactic,
        arch=kernel.arch,
        kernel_name=report.kernel if report else (cubin_kernel.name if cubin_kernel else None),
        registers=report.registers if report else cubin_regs,
        stack_frame_bytes=report.stack_frame_bytes if report else cubin_frame,
        spill_store_bytes=report.spill_store_bytes if report else None,
        spill_load_bytes=report.spill_load_bytes if report else None,
        static_smem_bytes=report.static_smem_bytes if report else None,
        launch_dynamic_smem_bytes=launches[0] if len(launches) == 1 else None,
        formula_smem_bytes=smem_bytes(kernel.tile, *kernel.tactic, dtypes=kernel.key.dtypes),
        cubin_sm=cubin_sm,
        cubin_registers=cubin_regs,
        cubin_frame_size=cubin_frame,
        ptxas_version=report.ptxas_version if report else None,
        compile_seconds=kernel.compile_seconds,
    )


EM_CUDA = 190

EIFMT_SVAL = 0x04
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
KERNEL_ATTRIBUTES = {
    EIATTR_REGCOUNT: "registers",
    EIATTR_FRAME_SIZE: "frame_size",
    EIATTR_MIN_STACK_SIZE: "min_stack_size",
    EIATTR_MAX_STACK_SIZE: "max_stack_size",
}


@dataclass(frozen=True)
class CubinKernel:
    """Resource attributes of one kernel in a cubin (None where the cubin has none)."""

    name: str
    registers: int | None = None
    frame_size: int | None = None
    min_stack_size: int | None = None
    max_stack_size: int | None = None
    shared_section_bytes: int | None = None
    """Size of ``.nv.shared.<kernel>`` (the DSL's cubins reserve 1 KiB there)."""


@dataclass(frozen=True)
class CubinInfo:
    """What a cubin says about itself."""

    sm: int
    """SM number from ``e_flags`` (103 for sm_103a)."""
    e_flags: int
    abi_version: int
    kernels: dict[str, CubinKernel] = field(default_factory=dict)


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int


def _sections(data: bytes) -> list[_Section]:
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]

    def name(offset: int) -> str:
        end = data.index(b"\0", names_at + offset)
        return data[names_at + offset : end].decode()

    return [_Section(name(s[0]), s[1], s[4], s[5], s[6]) for s in raw]


def _symbols(data: bytes, sections: list[_Section]) -> list[str]:
    symtab = next((s for s in sections if s.name == ".symtab"), None)
    if symtab is None:
        return []
    strtab = sections[symtab.link]
    names = []
    for offset in range(symtab.offset, symtab.offset + symtab.size, 24):
        name_offset = struct.unpack_from("<I", data, offset)[0]
        start = strtab.offset + name_offset
        names.append(data[start : data.index(b"\0", start)].decode())
    return names


def nv_info_attributes(payload: bytes) -> list[tuple[int, int, bytes]]:
    """``(format, attribute, value bytes)`` of every entry of a ``.nv.info`` section."""
    entries = []
    pos = 0
    while pos + 4 <= len(payload):
        fmt, attr = payload[pos], payload[pos + 1]
        if fmt == EIFMT_SVAL:
            size = struct.unpack_from("<H", payload, pos + 2)[0]
            entries.append((fmt, attr, payload[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        else:
            entries.append((fmt, attr, payload[pos + 2 : pos + 4]))
            pos += 4
    return entries


def sm_of(e_flags: int, abi_version: int) -> int:
    """The SM number in ``e_flags``: bits 8-15 from ELF ABI version 8 on, bits 0-7 before."""
    return (e_flags >> 8) & 0xFF if abi_version >= 8 else e_flags & 0xFF


def read_cubin(data: bytes) -> CubinInfo:
    """Parse a cubin; ValueError when ``data`` is not a 64-bit CUDA ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    machine = struct.unpack_from("<H", data, 0x12)[0]
    if machine != EM_CUDA:
        raise ValueError(f"ELF machine {machine} is not CUDA ({EM_CUDA})")
    abi_version = data[8]
    e_flags = struct.unpack_from("<I", data, 0x30)[0]
    sections = _sections(data)
    symbols = _symbols(data, sections)
    kernels = {s.name[len(".text.") :] for s in sections if s.name.startswith(".text.")}
    values: dict[str, dict[str, int]] = {name: {} for name in kernels}
    for section in sections:
        if section.name != ".nv.info":
            continue
        payload = data[section.offset : section.offset + section.size]
        for fmt, attr, value in nv_info_attributes(payload):
            if fmt != EIFMT_SVAL or attr not in KERNEL_ATTRIBUTES or len(value) < 8:
                continue
            symbol, amount = struct.unpack_from("<II", value)
            if symbol < len(symbols) and symbols[symbol] in values:
                values[symbols[symbol]][KERNEL_ATTRIBUTES[attr]] = amount
    shared = {
        s.name[len(".nv.shared.") :]: s.size
        for s in sections
        if s.name.startswith(".nv.shared.") and not s.name.startswith(".nv.shared.reserved")
    }
    return CubinInfo(
        sm=sm_of(e_flags, abi_version),
        e_flags=e_flags,
        abi_version=abi_version,
        kernels={
            name: CubinKernel(name, shared_section_bytes=shared.get(name), **values[name])
            for name in sorted(kernels)
        },
    )


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


@dataclass(frozen=True)
class PrecompileRequest:
    """One kernel to build: the weight shape it serves, the tile and the tactic."""

    n: int
    k: int
    tile: int
    tactic: Tactic


def precompile_requests(
    shapes: Iterable[tuple[int, int]],
    tiles: Iterable[int] = (16, 32, 48),
    *,
    all_tactics: bool = False,
    arch: str | None = None,
) -> list[PrecompileRequest]:
    """What to build for ``shapes`` (N, K) at ``tiles``: the tactic ``wide_mm`` would pick
    (pin or first valid), or every valid tactic with ``all_tactics`` (what a tuner profiles)."""

    requests: list[PrecompileRequest] = []
    tile_list = list(tiles)
    for n, k in shapes:
        for tile in tile_list:
            if all_tactics:
                chosen = wide_tactics(n, k, tile, arch=arch)
            else:
                chosen = [choose_tactic(n, k, tile, tile, arch=arch)]
            requests.extend(PrecompileRequest(n, k, tile, t) for t in chosen)
    return requests


@dataclass(frozen=True)
class PrecompileRecord:
    """One built kernel: what it was built for and its resources."""

    request: PrecompileRequest
    resources: KernelResources


def compile_with_resources(
    tile: int,
    tactic: tuple[int, int, int, int],
    *,
    arch: str | None = None,
    pdl: bool = True,
    use_ptxas: bool | None = None,
) -> KernelResources:
    """Compile (or reuse) one wide kernel and read its resources."""

    kernel = compile_wide(tile, tactic, arch=arch, pdl=pdl)
    return kernel_resources(kernel, use_ptxas=use_ptxas)


def precompile(
    requests: Iterable[PrecompileRequest],
    *,
    arch: str | None = None,
    pdl: bool = True,
    use_ptxas: bool | None = None,
) -> list[PrecompileRecord]:
    """Compile every request (see :func:`fi_patches.tools.wide_resources.precompile_requests`)."""
    return [
        PrecompileRecord(
            request,
            compile_with_resources(
                request.tile, request.tactic, arch=arch, pdl=pdl, use_ptxas=use_ptxas
            ),
        )
        for request in requests
    ]
