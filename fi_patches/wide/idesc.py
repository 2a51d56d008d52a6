"""Decode the ``tcgen05.mma`` instruction descriptors of a kernel's PTX, to show which MMA
shape the kernel really issues (N must equal the activation tile).

Field layout from the PTX ISA's instruction-descriptor table for ``.kind::mxf8f6f4`` /
``.kind::mxf4`` / ``.kind::mxf4nvf4``: bits 4-5 B scale-factor id, 7-9 A format, 10-12 B
format, 13/14 negate A/B, 15/16 transpose A/B, 17-22 N >> 3, 23 scale type (1 = UE8M0),
24-28 M >> 4, 29-30 A scale-factor id. The descriptor is built from constants, runtime
selects and masked runtime bits; a small known-bits evaluation recovers the fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from fi_patches.wide.ptx import Instruction, PtxEntry

FULL = 0xFFFFFFFF
_MAX_CHOICES = 64

N_SHIFT, N_MASK = 17, 0x3F
M_SHIFT, M_MASK = 24, 0x1F
SCALE_TYPE_BIT = 23
A_FORMAT_SHIFT, B_FORMAT_SHIFT, FORMAT_MASK = 7, 10, 0x7

Bits = tuple[int, int]
"""(known value, mask of undetermined bits)."""


@dataclass(frozen=True)
class InstructionDescriptor:
    """The shape and types one ``tcgen05.mma`` is encoded with."""

    m: int
    n: int
    a_format: int
    b_format: int
    ue8m0_scales: bool


def decode(value: int) -> InstructionDescriptor:
    """Decode a 32-bit block-scaled instruction descriptor."""
    return InstructionDescriptor(
        m=((value >> M_SHIFT) & M_MASK) << 4,
        n=((value >> N_SHIFT) & N_MASK) << 3,
        a_format=(value >> A_FORMAT_SHIFT) & FORMAT_MASK,
        b_format=(value >> B_FORMAT_SHIFT) & FORMAT_MASK,
        ue8m0_scales=bool((value >> SCALE_TYPE_BIT) & 1),
    )


def _literal(text: str) -> int | None:
    try:
        return int(text, 0) & FULL
    except ValueError:
        return None


class _Evaluator:
    def __init__(self, entry: PtxEntry) -> None:
        self.defs = entry.definitions()
        self.memo: dict[str, frozenset[Bits]] = {}
        self.active: set[str] = set()

    def operand(self, text: str) -> frozenset[Bits]:
        literal = _literal(text)
        if literal is not None:
            return frozenset({(literal, 0)})
        if not text.startswith("%"):
            return frozenset({(0, FULL)})
        return self.register(text)

    def register(self, reg: str) -> frozenset[Bits]:
        if reg in self.memo:
            return self.memo[reg]
        if reg in self.active or reg not in self.defs:
            return frozenset({(0, FULL)})
        self.active.add(reg)
        choices: set[Bits] = set()
        for ins in self.defs[reg]:
            choices |= self.instruction(ins)
        self.active.discard(reg)
        result = frozenset(choices) if len(choices) <= _MAX_CHOICES else frozenset({(0, FULL)})
        self.memo[reg] = result
        return result

    def instruction(self, ins: Instruction) -> frozenset[Bits]:
        op = ins.opcode.split(".")[0]
        args = ins.operands[1:]
        if op == "mov" and len(args) == 1:
            return self.operand(args[0])
        if op == "selp" and len(args) == 3:
            return self.operand(args[0]) | self.operand(args[1])
        if op == "or" and len(args) == 2:
            return frozenset(
                ((v1 | v2), (m1 | m2) & ~(v1 | v2) & FULL)
                for v1, m1 in self.operand(args[0])
                for v2, m2 in self.operand(args[1])
            )
        if op == "and" and len(args) == 2:
            return frozenset(
                (v1 & v2, ((m1 & (v2 | m2)) | (m2 & (v1 | m1))) & FULL)
                for v1, m1 in self.operand(args[0])
                for v2, m2 in self.operand(args[1])
            )
        return frozenset({(0, FULL)})


def mma_instructions(entry: PtxEntry) -> list[Instruction]:
    """The ``tcgen05.mma`` issues (not ``tcgen05.mma.ws`` or commits)."""
    return [ins for ins in entry.find("tcgen05.mma") if not ins.opcode.startswith("tcgen05.mma.ws")]


def descriptors(entry: PtxEntry) -> list[set[InstructionDescriptor]]:
    """For each ``tcgen05.mma``, the descriptors it can be issued with (runtime selects may give
    several, e.g. negate bits); ValueError when the shape fields are not statically known."""
    evaluator = _Evaluator(entry)
    shape_bits = (N_MASK << N_SHIFT) | (M_MASK << M_SHIFT) | (1 << SCALE_TYPE_BIT)
    found: list[set[InstructionDescriptor]] = []
    for ins in mma_instructions(entry):
        if len(ins.operands) < 4:
            raise ValueError(f"unexpected tcgen05.mma operands: {ins.text}")
        choices = evaluator.operand(ins.operands[3])
        if any(mask & shape_bits for _, mask in choices):
            raise ValueError(f"the descriptor's shape bits are not static: {ins.text}")
        found.append({decode(value) for value, _ in choices})
    return found
