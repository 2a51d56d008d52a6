"""A compiled wide kernel and the key it is cached under."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fi_patches.wide.dtypes import GemmDtypes
from fi_patches.wide.tactic import Tactic


@dataclass(frozen=True)
class WideKey:
    """What a compiled wide kernel is specialized on; the problem shape is a runtime argument."""

    tile: int
    tactic: Tactic
    arch: str
    pdl: bool
    dtypes: GemmDtypes

    def __str__(self) -> str:
        pdl = "pdl" if self.pdl else "no-pdl"
        return f"tile {self.tile} tactic {self.tactic} {self.arch} {pdl}"


@dataclass(eq=False)
class WideKernel:
    """A DSL-compiled wide kernel: call it with the kernel's pointer arguments (see
    :func:`fi_patches.wide.launch.launch_wide`). ``ptx`` / ``cubin`` are the device code the
    DSL produced (None when compiled without keeping artifacts)."""

    key: WideKey
    function: Any
    ptx: str | None
    cubin: bytes | None
    compile_seconds: float
    _host_ir: str | None = field(default=None, repr=False)

    @property
    def tile(self) -> int:
        return self.key.tile

    @property
    def tactic(self) -> Tactic:
        return self.key.tactic

    @property
    def arch(self) -> str:
        return self.key.arch

    @property
    def pdl(self) -> bool:
        return self.key.pdl

    def host_ir(self) -> str:
        """The lowered host module's text (holds the launch configuration), computed once."""
        if self._host_ir is None:
            self._host_ir = str(self.function.ir_module)
        return self._host_ir

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)
