"""Read the launch configuration the DSL lowered into a compiled kernel's host code: the
dynamic shared memory it passes to ``cudaLaunchKernelEx``. This is the number the driver will
check, so it is the ground truth for the shared-memory formula."""

from __future__ import annotations

import re

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
