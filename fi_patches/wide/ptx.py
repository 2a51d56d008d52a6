"""The wide kernel's PTX, read and checked: which MMA shape it issues and whether it keeps its
PDL ordering (diagnostics, for the self-check and the tests; serving never reads PTX).

A small reader for the DSL's PTX: the ``.entry`` function as basic blocks with control-flow
edges, register definitions, and reachability, enough to check instruction order statically.

Inline-asm regions (``// begin inline asm`` .. ``// end inline asm``) are kept as straight-line
code: their local labels and branches (spin loops on mbarriers) cannot leave the region.

:func:`descriptors` decodes the ``tcgen05.mma`` instruction descriptors of a kernel's PTX, to
show which MMA shape the kernel really issues (N must equal the activation tile).

Field layout from the PTX ISA's instruction-descriptor table for ``.kind::mxf8f6f4`` /
``.kind::mxf4`` / ``.kind::mxf4nvf4``: bits 4-5 B scale-factor id, 7-9 A format, 10-12 B
format, 13/14 negate A/B, 15/16 transpose A/B, 17-22 N >> 3, 23 scale type (1 = UE8M0),
24-28 M >> 4, 29-30 A scale-factor id. The descriptor is built from constants, runtime
selects and masked runtime bits; a small known-bits evaluation recovers the fields.

:func:`pdl_order` checks, from a kernel's PTX, the Programmatic Dependent Launch ordering the
wide tile keeps: weight (A/SFA) TMA loads never wait on the previous grid, activation (B/SFB)
loads always do, and the dependents' launch is triggered after the weight loads are issued.

Order is judged by control flow within one thread (what can execute after what), not by
position in the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fi_patches.internals import flashinfer as fi

_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(")
_LABEL = re.compile(r"^(\$?[\w$]+):$")
_PRED = re.compile(r"^@!?%\w+\s+")
_PARAM = re.compile(r"_param_(\d+)$")


@dataclass(frozen=True)
class Instruction:
    """One PTX statement: ``opcode`` (e.g. ``cp.async.bulk.tensor.3d...``) and its operands."""

    index: int
    block: int
    text: str
    opcode: str
    operands: tuple[str, ...]
    predicated: bool
    in_asm: bool


@dataclass
class Block:
    label: str | None
    instructions: list[Instruction] = field(default_factory=list)
    successors: list[int] = field(default_factory=list)


@dataclass
class PtxEntry:
    """The body of one ``.entry`` kernel."""

    name: str
    params: list[str]
    target: str | None
    blocks: list[Block]

    @property
    def instructions(self) -> list[Instruction]:
        return [ins for block in self.blocks for ins in block.instructions]

    def find(self, opcode_prefix: str) -> list[Instruction]:
        """Instructions whose opcode starts with ``opcode_prefix``."""
        return [ins for ins in self.instructions if ins.opcode.startswith(opcode_prefix)]

    def definitions(self) -> dict[str, list[Instruction]]:
        """Register -> the instructions writing it (first operand, outside inline asm)."""
        defs: dict[str, list[Instruction]] = {}
        for ins in self.instructions:
            if ins.in_asm or not ins.operands or not ins.operands[0].startswith("%"):
                continue
            if ins.opcode.startswith(("st.", "bra", "cp.", "tcgen05.", "mbarrier.")):
                continue
            defs.setdefault(ins.operands[0], []).append(ins)
        return defs

    def param_index(self, symbol: str) -> int | None:
        """``<entry>_param_N`` -> N."""
        match = _PARAM.search(symbol)
        return int(match.group(1)) if match and symbol.startswith(self.name) else None

    def reachable(
        self,
        starts: Iterable[Instruction],
        *,
        stop: Callable[[Instruction], bool] | None = None,
        include_starts: bool = False,
    ) -> set[int]:
        """Indices of instructions that can execute after ``starts`` in one thread, not passing
        through an instruction for which ``stop`` is true (that one is included, not passed)."""
        seen: set[int] = set()
        work: list[tuple[int, int]] = []  # (block, position in block)
        positions: dict[int, tuple[int, int]] = {}
        for block_id, block in enumerate(self.blocks):
            for pos, ins in enumerate(block.instructions):
                positions[ins.index] = (block_id, pos)
        for ins in starts:
            block_id, pos = positions[ins.index]
            if include_starts:
                work.append((block_id, pos))
            else:
                work.append((block_id, pos + 1))
        visited_blocks: set[int] = set()
        while work:
            block_id, pos = work.pop()
            block = self.blocks[block_id]
            halted = False
            for ins in block.instructions[pos:]:
                seen.add(ins.index)
                if stop is not None and stop(ins):
                    halted = True
                    break
            if halted:
                continue
            for succ in block.successors:
                if succ not in visited_blocks:
                    visited_blocks.add(succ)
                    work.append((succ, 0))
        return seen

    def entry_instruction(self) -> Instruction | None:
        for block in self.blocks:
            if block.instructions:
                return block.instructions[0]
        return None


def _split_operands(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _entry_text(ptx: str, name: str | None) -> tuple[str, str, str]:
    for match in _ENTRY.finditer(ptx):
        if name is not None and match.group(1) != name:
            continue
        close = ptx.index(")", match.end())
        params = ptx[match.end() : close]
        body_start = ptx.index("{", close)
        depth = 0
        for pos in range(body_start, len(ptx)):
            if ptx[pos] == "{":
                depth += 1
            elif ptx[pos] == "}":
                depth -= 1
                if depth == 0:
                    return match.group(1), params, ptx[body_start + 1 : pos]
    raise ValueError(f"no .entry {name or ''} in the PTX")


def parse_entry(ptx: str, name: str | None = None) -> PtxEntry:
    """The (first, or the named) ``.entry`` of ``ptx`` as basic blocks."""
    entry_name, param_text, body = _entry_text(ptx, name)
    params = re.findall(r"(\w+_param_\d+)", param_text)
    target_match = re.search(r"^\.target\s+(\S+)", ptx, re.MULTILINE)
    blocks: list[Block] = [Block(None)]
    labels: dict[str, int] = {}
    pending: list[tuple[int, str, bool]] = []  # (block, target label, falls through)
    in_asm = False
    index = 0
    terminated = False
    for raw in body.splitlines():
        line = raw.strip()
        if line.startswith("// begin inline asm"):
            in_asm = True
            continue
        if line.startswith("// end inline asm"):
            in_asm = False
            continue
        line = line.split("//", 1)[0].strip()
        if not line:
            continue
        label = _LABEL.match(line)
        if label and not in_asm:
            blocks.append(Block(label.group(1)))
            labels[label.group(1)] = len(blocks) - 1
            if not terminated:
                pending.append((len(blocks) - 2, "", True))
            terminated = False
            continue
        if in_asm and (label or line in ("{", "}") or line.startswith(".reg")):
            continue
        if not in_asm and line.startswith(".") and not line.startswith(".pragma"):
            continue  # declarations
        if terminated:
            blocks.append(Block(None))
            terminated = False
        statement = line.rstrip(";").strip()
        predicated = bool(_PRED.match(statement))
        statement_body = _PRED.sub("", statement)
        opcode, _, rest = statement_body.partition(" ")
        operands = tuple(_split_operands(rest.strip())) if rest.strip() else ()
        block_id = len(blocks) - 1
        blocks[block_id].instructions.append(
            Instruction(index, block_id, statement, opcode, operands, predicated, in_asm)
        )
        index += 1
        if in_asm:
            continue
        if opcode.startswith("bra"):
            pending.append((block_id, operands[0] if operands else "", False))
            if predicated:
                blocks.append(Block(None))
                pending.append((block_id, "", True))
            else:
                terminated = True
        elif opcode in ("ret", "exit", "trap"):
            if predicated:
                blocks.append(Block(None))
                pending.append((block_id, "", True))
            else:
                terminated = True
    for block_id, target, falls in pending:
        if falls:
            if block_id + 1 < len(blocks):
                blocks[block_id].successors.append(block_id + 1)
        elif target in labels:
            blocks[block_id].successors.append(labels[target])
    return PtxEntry(entry_name, params, target_match.group(1) if target_match else None, blocks)


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


TMA_LOAD = "cp.async.bulk.tensor"
WAIT = "griddepcontrol.wait"
TRIGGER = "griddepcontrol.launch_dependents"


def tma_param_indices() -> dict[str, int]:
    """PTX parameter index of each operand's TMA descriptor, from the kernel method's signature
    (every argument before them lowers to one parameter; the probe of that method guards it)."""
    return fi.kernel_tma_param_indices()


def descriptor_param(entry: PtxEntry, load: Instruction) -> int | None:
    """The kernel parameter whose TMA descriptor ``load`` reads (through ``mov``/``cvta``)."""
    if len(load.operands) < 2:
        return None
    reg = load.operands[1].strip("[]").split(",")[0].strip()
    defs = entry.definitions()
    for _ in range(8):
        found = defs.get(reg)
        if not found or len(found) != 1 or len(found[0].operands) < 2:
            return None
        source = found[0].operands[1]
        index = entry.param_index(source)
        if index is not None:
            return index
        reg = source
    return None


@dataclass(frozen=True)
class PdlOrder:
    """What the PTX says about the kernel's PDL ordering."""

    weight_loads: int
    activation_loads: int
    waits: int
    triggers: int
    weight_loads_wait_free: bool
    """No weight (A/SFA) load can execute after a grid wait."""
    activation_loads_behind_wait: bool
    """Every activation (B/SFB) load executes only after a grid wait."""
    trigger_after_weight_loads: bool
    """Each trigger can follow a weight load, no weight load can follow a trigger, and no
    trigger waits on the grid first."""

    @property
    def ok(self) -> bool:
        return (
            self.weight_loads > 0
            and self.activation_loads > 0
            and self.waits > 0
            and self.triggers > 0
            and self.weight_loads_wait_free
            and self.activation_loads_behind_wait
            and self.trigger_after_weight_loads
        )


def pdl_order(entry: PtxEntry, params: dict[str, int] | None = None) -> PdlOrder:
    """Analyse the PDL ordering of ``entry`` (see :class:`PdlOrder`)."""
    roles = params or tma_param_indices()
    by_param = {index: role for role, index in roles.items()}
    loads = entry.find(TMA_LOAD)
    role_of: dict[int, str | None] = {}
    for ins in loads:
        index = descriptor_param(entry, ins)
        role_of[ins.index] = None if index is None else by_param.get(index)
    weight = [ins for ins in loads if role_of[ins.index] in ("a", "sfa")]
    activation = [ins for ins in loads if role_of[ins.index] in ("b", "sfb")]
    waits = entry.find(WAIT)
    triggers = entry.find(TRIGGER)

    after_wait = entry.reachable(waits)
    before_any_wait = entry.reachable(
        [start] if (start := entry.entry_instruction()) else [],
        stop=lambda ins: ins.opcode.startswith(WAIT),
        include_starts=True,
    )
    after_weight = entry.reachable(weight)
    after_trigger = entry.reachable(triggers)
    return PdlOrder(
        weight_loads=len(weight),
        activation_loads=len(activation),
        waits=len(waits),
        triggers=len(triggers),
        weight_loads_wait_free=not any(ins.index in after_wait for ins in weight),
        activation_loads_behind_wait=not any(ins.index in before_any_wait for ins in activation),
        trigger_after_weight_loads=(
            all(t.index in after_weight for t in triggers)
            and not any(ins.index in after_trigger for ins in weight)
            and not any(t.index in after_wait for t in triggers)
        ),
    )
