"""Read a CUDA cubin (ELF) without NVIDIA tools: its SM arch and the per-kernel resource
attributes ptxas records in ``.nv.info`` (registers, stack frame, stack sizes).

``.nv.info`` is a list of attributes: format byte, attribute byte, then a 16-bit value
(formats 1-3) or a 16-bit size and that many payload bytes (format 4, whose per-kernel payload
starts with the kernel's symbol index).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

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
