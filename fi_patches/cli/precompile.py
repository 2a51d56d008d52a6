"""``precompile``: compile every pinned wide kernel for the device (or ``--arch``) before
serving, with a progress bar, and report each kernel's compile time and resources (a pinned
tactic that spills registers is flagged)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fi_patches.cli.table import render


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "precompile", help="compile the pinned wide kernels and report them"
    )
    parser.add_argument("--pins", help="pin table (default: FI_PATCHES_PINS or none)")
    parser.add_argument(
        "--arch", help="compile for this arch (sm_103a, sm_100a) instead of the device's"
    )
    parser.add_argument(
        "--no-ptxas", action="store_true", help="read resources from the cubin only"
    )
    parser.set_defaults(run=run)


def _blocked(arch_given: bool) -> str | None:
    """Why the wide kernel cannot be built here, or None."""
    from fi_patches.compat.evaluate import status_of
    from fi_patches.features import feature

    record = status_of("wide_tile")
    if record.enabled:
        return None
    if arch_given:  # the device gate does not apply to an explicit arch; the internals do
        failed = [i.probe() for i in feature("wide_tile").internals()]
        problems = [f for f in failed if f]
        return problems[0] if problems else None
    return record.reason


def _progress(total: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="compiling wide kernels", unit="kernel", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from fi_patches.pins.default import as_table, default_pins
    from fi_patches.pins.errors import PinTableError

    try:
        table = as_table(args.pins) if args.pins else default_pins()
    except PinTableError as exc:
        print(f"precompile: {exc}", file=sys.stderr)
        return 1
    entries = table.entries("wide")
    if not entries:
        print(f"precompile: no [[wide]] pins in {table.source}; nothing to compile")
        return 0
    blocked = _blocked(bool(args.arch))
    if blocked:
        print(f"precompile: the wide kernel cannot be built here: {blocked}", file=sys.stderr)
        return 1
    from fi_patches.pins.keys import as_tactic
    from fi_patches.tools.wide_resources import compile_with_resources
    from fi_patches.wide.budget import WideArchError, resolve_arch
    from fi_patches.wide.kernel import compile_wide
    from fi_patches.wide.tactics import wide_pin_reason

    try:
        arch = resolve_arch(args.arch)
    except WideArchError as exc:
        print(f"precompile: {exc}", file=sys.stderr)
        return 1
    rows: list[tuple[Any, ...]] = []
    failures = spills = 0
    bar = _progress(len(entries))
    for entry in entries:
        label = (f"{entry.n}x{entry.k}", entry.tile, as_tactic(entry.tactic))
        reason = wide_pin_reason(entry.n, entry.k, entry.tile, entry.tactic, arch=arch)
        if reason is None:
            use_ptxas = False if args.no_ptxas else None  # None: ptxas when it is installed
            try:
                res = compile_with_resources(
                    entry.tile, entry.tactic, arch=arch, use_ptxas=use_ptxas
                )
                seconds = compile_wide(entry.tile, entry.tactic, arch=arch).compile_seconds
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                spilled = bool(res.spill_store_bytes or res.spill_load_bytes)
                spills += spilled
                spill_text = (
                    "n/a"
                    if res.spill_store_bytes is None
                    else f"{res.spill_store_bytes}/{res.spill_load_bytes}"
                )
                note = "SPILLS registers" if spilled else ""
                rows.append(
                    (
                        *label,
                        f"{seconds:.2f}",
                        res.registers,
                        spill_text,
                        res.stack_frame_bytes,
                        res.launch_dynamic_smem_bytes,
                        note,
                    )
                )
        if reason is not None:
            failures += 1
            rows.append((*label, "-", "-", "-", "-", "-", f"not built: {reason}"))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    print(f"wide kernels for {arch} from {table.source}:")
    print(
        render(
            (
                "weight",
                "tile",
                "tactic",
                "compile s",
                "registers",
                "spill st/ld",
                "stack",
                "smem",
                "note",
            ),
            rows,
        )
    )
    if spills:
        print(f"{spills} pinned kernel(s) spill registers: consider another tactic for that tile")
    return 1 if failures else 0
