"""``validate``: check a pin table on this host's GPU (numerics of every pinned kernel against a
float64 reference, wide tiles at every row count, a chain's time pinned vs stock-tuned) and
report in markdown and JSON. Off sm_100/sm_103 every check is reported as not run, and the exit
code is 3, as it is when any check did not run or there was none, so ``validate && deploy``
never passes on checks that did not run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "validate",
        help="check pinned kernels on this GPU (sm_100/sm_103) and report; exit 1 if a check "
        "failed, 3 if one could not run",
    )
    parser.add_argument("--pins", help="the pin table (default: the default pin table)")
    parser.add_argument(
        "--chain",
        help="CHAIN.toml (or a shipped example's name): also time this chain, pinned vs "
        "stock-tuned, per bucket",
    )
    parser.add_argument(
        "--report",
        metavar="OUT.md",
        help="write the markdown report here and the JSON report beside it (OUT.json)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fi_patches._atomic import OutputError, check_output, overwrites_input, write_all
    from fi_patches.chain.spec import ChainError, ChainSpec, chain_path
    from fi_patches.chain.validate import NOT_RUN, validate
    from fi_patches.pins.default import default_pins
    from fi_patches.pins.errors import PinTableError
    from fi_patches.pins.table import PinTable

    if args.report:
        report_json = Path(args.report).with_suffix(".json")
        clash = overwrites_input(
            [("--report", args.report), ("the JSON report", report_json)],
            [("--pins", args.pins), ("--chain", args.chain)],
        )
        if clash:
            print(f"validate: {clash}", file=sys.stderr)
            return 2
    try:
        table = PinTable.from_file(args.pins) if args.pins else default_pins()
        spec = ChainSpec.from_file(chain_path(args.chain)) if args.chain else None
    except (ChainError, PinTableError) as exc:
        print(f"validate: {exc}", file=sys.stderr)
        return 1
    if args.report:
        out = Path(args.report)
        try:
            check_output(out, (".md",))
            check_output(out.with_suffix(".json"))
        except OutputError as exc:
            print(f"validate: --report {exc}", file=sys.stderr)
            return 2
    report = validate(table, spec)
    markdown = report.to_markdown()
    if args.report:
        data = out.with_suffix(".json")
        try:
            write_all([(out, markdown), (data, json.dumps(report.to_json(), indent=1) + "\n")])
        except OutputError as exc:
            print(f"validate: --report {exc}", file=sys.stderr)
            return 2
        print(f"validate: {report.summary()}; wrote {out} and {data}")
    else:
        print(markdown, end="")
    if report.failed:
        return 1
    return 3 if report.count(NOT_RUN) or not report.checks else 0
