"""A small reader for the DSL's PTX: the ``.entry`` function as basic blocks with control-flow
edges, register definitions, and reachability, enough to check instruction order statically.

Inline-asm regions (``// begin inline asm`` .. ``// end inline asm``) are kept as straight-line
code: their local labels and branches (spin loops on mbarriers) cannot leave the region.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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
