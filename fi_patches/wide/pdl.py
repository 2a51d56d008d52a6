"""Check, from a kernel's PTX, the Programmatic Dependent Launch ordering the wide tile keeps:
weight (A/SFA) TMA loads never wait on the previous grid, activation (B/SFB) loads always do,
and the dependents' launch is triggered after the weight loads are issued.

Order is judged by control flow within one thread (what can execute after what), not by
position in the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from fi_patches.internals import flashinfer as fi
from fi_patches.wide.ptx import Instruction, PtxEntry

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
