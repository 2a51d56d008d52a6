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
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return 0
    rows = [
        (r.name, "enabled" if r.enabled else "disabled", r.flashinfer, r.device, r.reason)
        for r in records
    ]
    print(render(("feature", "state", "flashinfer", "device", "reason"), rows))
    pins = [(r.name, r.pins) for r in records if r.pins]
    if pins:
        print()
        print(render(("feature", "pins"), pins))
    print(f"\nstart-up hook: {hook_state().summary()}")
    return 0
