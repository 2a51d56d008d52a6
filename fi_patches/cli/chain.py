"""The commands over a chain of ops (:mod:`fi_patches.chain`).

``tune``: choose pins by timing each op's tactics in the chain they run in (or alone, with
``--isolated``), write the pin table and its provenance sidecar.

``validate``: check a pin table on this host's GPU (numerics of every pinned kernel against a
float64 reference, wide tiles at every row count, a chain's time pinned vs stock-tuned) and
report in markdown and JSON. Off sm_100/sm_103 every check is reported as not run, and the exit
code is 3, as it is when any check did not run or there was none, so ``validate && deploy``
never passes on checks that did not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fi_patches.cli.console import render


def register_tune(commands: Any) -> None:
    parser = commands.add_parser(
        "tune", help="choose pins by timing tactics in the chain they run in"
    )
    parser.add_argument(
        "--chain",
        required=True,
        help="CHAIN.toml (ops, row buckets, repeats), or a shipped example's name: deepseek_v3_tp4",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="the pin table to write (.toml or .json); its provenance goes beside it as "
        "<stem>.provenance.json",
    )
    parser.add_argument(
        "--isolated", action="store_true", help="time each op alone instead of in the chain"
    )
    parser.add_argument(
        "--timings",
        metavar="FILE",
        help="select from recorded measurements (a file --save-timings wrote) instead of "
        "timing on this machine's GPU",
    )
    parser.add_argument(
        "--save-timings", metavar="FILE", help="also record every measurement to this JSON file"
    )
    parser.add_argument(
        "--pins", help="the current pins, which ties go to (default: the default pin table)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(run=run_tune)


def _fail(message: str, code: int) -> int:
    print(f"tune: {message}", file=sys.stderr)
    return code


def _command(args: argparse.Namespace) -> str:
    parts = ["python -m fi_patches tune", f"--chain {args.chain}", f"--out {args.out}"]
    if args.isolated:
        parts.append("--isolated")
    if args.timings:
        parts.append(f"--timings {args.timings}")
    return " ".join(parts)


def run_tune(args: argparse.Namespace) -> int:
    from fi_patches._atomic import OutputError, check_output, overwrites_input
    from fi_patches.chain.plan import sidecar_path
    from fi_patches.chain.spec import ChainError, ChainSpec, chain_path
    from fi_patches.pins.reading import PIN_SUFFIXES, PinTableError
    from fi_patches.pins.table import PinTable, default_pins

    clash = overwrites_input(
        [
            ("--out", args.out),
            ("the provenance sidecar", sidecar_path(args.out)),
            ("--save-timings", args.save_timings),
        ],
        [("--chain", args.chain), ("--pins", args.pins), ("--timings", args.timings)],
    )
    if clash:
        return _fail(clash, 2)
    try:
        outputs = [check_output(args.out, PIN_SUFFIXES)]
        outputs.append(check_output(sidecar_path(args.out)))
        if args.save_timings:
            outputs.append(check_output(args.save_timings, (".json",)))
    except OutputError as exc:
        return _fail(str(exc), 2)
    try:
        spec = ChainSpec.from_file(chain_path(args.chain))
        current = PinTable.from_file(args.pins) if args.pins else default_pins()
    except (ChainError, PinTableError) as exc:
        return _fail(str(exc), 1)
    missing = _without_flashinfer()
    if missing is not None:
        return _fail(missing, 2)
    try:
        timer, device, version = _timer(args, spec)
    except ChainError as exc:
        return _fail(str(exc), 1)
    except _CannotTime as exc:
        return _fail(str(exc), 2)
    try:
        return _tune(args, spec, current, timer, device, version)
    except (ChainError, PinTableError) as exc:
        return _fail(str(exc), 1)
    except OutputError as exc:
        return _fail(str(exc), 2)


class _CannotTime(Exception):
    pass


def _without_flashinfer() -> str | None:
    """None where FlashInfer imports, else the line saying what of ``tune`` needs it: the
    chain's buckets are its tuner's, and its runners are what the pins are for, even when
    replaying ``--timings``."""
    from fi_patches.compat.features import flashinfer_unusable

    why = flashinfer_unusable()
    if why is None:
        return None
    return (
        f"needs FlashInfer, and {why}: its tuner's row buckets and runners decide what a "
        "chain's pins may be, with --timings too"
    )


def _timer(args: argparse.Namespace, spec: Any) -> tuple[Any, str, str]:
    """The timer, the device arch measured on and the FlashInfer version."""
    from fi_patches.chain.timing import RecordingTimer, ReplayTimer
    from fi_patches.compat.target import arch_error, normalize_arch

    if args.timings:
        replay = ReplayTimer(args.timings)
        arch = normalize_arch(replay.device)
        if arch is None:
            from fi_patches.chain.spec import ReplayError

            raise ReplayError(f"{args.timings}: device = {arch_error(replay.device)}")
        timer: Any = replay
        device, version = arch, replay.flashinfer
    else:
        from fi_patches.chain.timing import CudaGraphTimer
        from fi_patches.chain.validate import blackwell_reason
        from fi_patches.compat.features import installed_flashinfer

        # The GPU itself times the kernels: FI_PATCHES_DEVICE names the pins' target, and a
        # CPU or another GPU cannot stand in for an sm_100/sm_103 device.
        absent = blackwell_reason()
        if absent is not None:
            raise _CannotTime(
                "timing FlashInfer's MXFP8 kernels needs an sm_100/sm_103 GPU, whatever "
                f"FI_PATCHES_DEVICE says; here {absent}. Pass --timings FILE to select from "
                "recorded measurements."
            )
        s = spec.settings
        timer = CudaGraphTimer(replays=s.replays, warmup=s.warmup, cold_l2=s.cold_l2)
        device, version = _cuda_arch(), installed_flashinfer().version_text or "unknown"
    if args.save_timings:
        timer = RecordingTimer(timer)
    return timer, device, version


def _cuda_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _tune(
    args: argparse.Namespace, spec: Any, current: Any, timer: Any, device: str, version: str
) -> int:
    from fi_patches._atomic import write_all
    from fi_patches.chain import plan as output
    from fi_patches.chain.plan import build_plan, check_tuner_buckets
    from fi_patches.chain.select import tune
    from fi_patches.cli.console import progress
    from fi_patches.pinning import stack
    from fi_patches.pinning.validate import mxfp8_bucket_of

    check_tuner_buckets(spec, mxfp8_bucket_of())
    plan = build_plan(spec, sm_version=int(device[3:]), current=current)
    bar = None if args.no_progress else progress(sys.stderr, "tune")
    try:
        # No pins active while measuring: the runners offer and run FlashInfer's own lists.
        with stack.isolated():
            results = tune(plan, timer, spec.settings, isolated=args.isolated, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    sidecar = output.sidecar_path(args.out)
    table = output.pin_table(
        plan,
        results,
        device=device,
        flashinfer=version,
        source=_command(args),
        note=output.note(spec, results, sidecar.name),
        path=str(args.out),
    )
    if not _checked(table):
        return 1
    describe = getattr(timer, "describe", None)
    record = output.provenance(
        spec,
        results,
        device=device,
        flashinfer=version,
        timer=str(describe()) if callable(describe) else type(timer).__name__,
        command=_command(args),
    )
    files = output.files(table, args.out, record)
    if args.save_timings:
        files.append((args.save_timings, timer.text(device=device, flashinfer=version)))
    write_all(files)
    print(_report(results))
    from fi_patches._text import section_counts

    counts = section_counts(table.to_mapping())
    print(f"wrote {args.out} ({counts}) and {sidecar}")
    return 0


def _checked(table: Any) -> bool:
    """``pins check``'s verdict on the new table: False (printed) if an entry is invalid."""
    from fi_patches.tools.check import INVALID, check_entries

    meta_problem, results = check_entries(table)
    bad = [r for r in results if r.state == INVALID]
    for r in bad:
        print(
            f"tune: [[{r.section}]] #{r.index} {r.shape} rows {r.rows}: {r.reason}", file=sys.stderr
        )
    if meta_problem:
        print(f"tune: note: {meta_problem}", file=sys.stderr)
    return not bad


def _report(results: Any) -> str:
    """Per bucket and runner coordinate: the tactic chosen, its median and spread in its last
    step (the chain's time, or the op's alone with --isolated) and how it was chosen."""
    from fi_patches.pins.keys import tactic_json

    rows = []
    for result in results:
        for coordinate, tactic in result.chosen.items():
            step = result.final_step(coordinate)
            stats = step.stats_of(tactic)
            ops = ", ".join(name for name, c in result.slots if c == coordinate)
            rows.append(
                (
                    result.bucket.label,
                    ops,
                    coordinate,
                    tactic_json(tactic),
                    f"{stats.median:.2f}",
                    f"{stats.spread:.1%}",
                    f"tie of {len(step.tied)}: {step.rule}" if step.tie else step.rule,
                )
            )
    mode = results[0].mode if results else "chain"
    timed = "chain us" if mode == "chain" else "alone us"
    return render(("rows", "op", "runner", "tactic", timed, "spread", "choice"), rows)


def register_validate(commands: Any) -> None:
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
    parser.set_defaults(run=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    from fi_patches._atomic import OutputError, check_output, overwrites_input, write_all
    from fi_patches.chain.spec import ChainError, ChainSpec, chain_path
    from fi_patches.chain.validate import NOT_RUN, validate
    from fi_patches.pins.reading import PinTableError
    from fi_patches.pins.table import PinTable, default_pins

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
