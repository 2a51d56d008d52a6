"""``pins record`` turns a FlashInfer tuner cache into a pin table; ``pins check`` validates a
table against the installed FlashInfer and device."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fi_patches.cli.table import render


def register(commands: Any) -> None:
    parser = commands.add_parser("pins", help="record or check pin tables")
    verbs = parser.add_subparsers(dest="verb", required=True)
    record = verbs.add_parser("record", help="a pin table from a FlashInfer tuner cache")
    record.add_argument(
        "--from", dest="source", required=True, help="v1 JSON file or v2 store directory"
    )
    record.add_argument("--out", help="write the table here (.toml or .json); default: stdout")
    record.add_argument("--device", help="the device the cache was tuned on (default: this one)")
    record.set_defaults(run=run_record)
    check = verbs.add_parser(
        "check", help="validate a pin table here; exit 1 if any entry is invalid"
    )
    check.add_argument("table", help="a .toml or .json pin table")
    check.set_defaults(run=run_check)


def run_record(args: argparse.Namespace) -> int:
    import json

    from fi_patches.compat.device import current_device, normalize_arch
    from fi_patches.compat.installed import installed_flashinfer
    from fi_patches.pinning.validate import mxfp8_bucket_of
    from fi_patches.pins.errors import PinTableError
    from fi_patches.pins.record import read_cache, to_table
    from fi_patches.pins.toml_writer import dumps

    device = normalize_arch(args.device) if args.device else current_device().arch
    if device is None:
        print(
            "pins record: say which device the cache was tuned on with --device sm_103 "
            "(this machine has none)",
            file=sys.stderr,
        )
        return 2
    try:
        entries, metadata = read_cache(args.source)
        version = str(metadata.get("flashinfer_version") or installed_flashinfer().version_text)
        table = to_table(
            entries,
            device=device,
            flashinfer_version=version,
            source=f"recorded from {args.source}",
            bucket_of=mxfp8_bucket_of(),
        )
    except PinTableError as exc:
        print(f"pins record: {exc}", file=sys.stderr)
        return 1
    mapping = table.to_mapping()
    text = (
        json.dumps(mapping, indent=2) + "\n"
        if str(args.out or "").endswith(".json")
        else dumps(mapping)
    )
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        counts = (
            ", ".join(f"{len(v)} {k}" for k, v in mapping.items() if k != "meta") or "no entries"
        )
        print(f"wrote {args.out}: {counts}")
    else:
        print(text, end="")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from fi_patches.pins.check import INVALID, UNCHECKED, check_entries
    from fi_patches.pins.errors import PinTableError
    from fi_patches.pins.table import PinTable

    try:
        table = PinTable.from_file(args.table)
    except PinTableError as exc:
        print(f"pins check: invalid pin table: {exc.one_line()}")
        return 1
    meta_problem, results = check_entries(table)
    print(
        f"{args.table}: chosen on {table.meta.device}, FlashInfer {table.meta.flashinfer or 'any'}"
    )
    print(f"meta: {meta_problem or 'OK'}")
    rows = [
        (f"[[{r.section}]] #{r.index}", r.shape, r.rows, r.tactic, r.state, r.reason)
        for r in results
    ]
    if rows:
        print(render(("entry", "weight", "rows", "tactic", "state", "reason"), rows))
    if meta_problem or any(r.state == INVALID for r in results):
        return 1
    return 3 if any(r.state == UNCHECKED for r in results) else 0
