"""``doctor``: which features are enabled here, and why the others are not."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fi_patches.cli.hook import hook_state
from fi_patches.cli.table import render


def register(commands: Any) -> None:
    parser = commands.add_parser("doctor", help="report each feature's state and reason")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--fresh", action="store_true", help="run every self-check again (ignore the cache)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fi_patches.compat import selfcheck_cache
    from fi_patches.overview import status

    selfcheck_cache.bypass(args.fresh)
    records = status()
    ops = _pinned_ops()
    if args.json:
        report = [r.to_dict() for r in records]
        for item in report:
            if item["name"] == "pinned_ops":
                item["ops"] = [dict(op.__dict__) for op in ops]
        print(json.dumps(report, indent=2))
        return 0
    rows = [
        (
            r.name,
            "enabled" if r.enabled else "disabled",
            r.flashinfer,
            r.cute_dsl,
            "yes" if r.in_matrix else "no",
            r.device,
            r.reason,
        )
        for r in records
    ]
    header = ("feature", "state", "flashinfer", "cute dsl", "in matrix", "device", "reason")
    print(render(header, rows))
    pins = [(r.name, r.pins) for r in records if r.pins]
    if pins:
        print()
        print(render(("feature", "pins"), pins))
    if ops:
        print()
        counts = [(o.op, o.entries, o.applied, o.invalid, o.unchecked) for o in ops]
        print(render(("op", "entries", "applied", "invalid", "unchecked"), counts))
    print(f"\nstart-up hook: {hook_state().summary()}")
    print(f"patch sets: {patch_sets()}")
    from fi_patches.sglang.plugin import summary

    print(f"SGLang plugin: {summary()}")
    return 0


def _pinned_ops() -> list[Any]:
    """The default table's ``[[pin]]`` entries per op, as ``pins check`` judges them here."""
    from fi_patches.pins.check import pins_per_op
    from fi_patches.pins.default import default_pins
    from fi_patches.pins.errors import PinTableError

    try:
        return pins_per_op(default_pins())
    except PinTableError:
        return []  # the pins column already names the problem


def patch_sets() -> str:
    """Each patch set of the lifecycle registry and whether it is installed in this process."""
    from fi_patches import startup

    states = [
        f"{name} {'not loaded' if entry is None else 'installed' if entry.installed else 'off'}"
        for name, entry in startup.entries()
    ]
    return ", ".join(states)
