"""``pins record`` turns one or several FlashInfer tuner caches into a pin table; ``pins diff``
compares caches and tables per bucket; ``pins check`` validates a table against the installed
FlashInfer and device."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fi_patches.cli.console import render


def register(commands: Any) -> None:
    parser = commands.add_parser("pins", help="record, compare or check pin tables")
    verbs = parser.add_subparsers(dest="verb", required=True)
    record = verbs.add_parser(
        "record", help="a pin table from one or several FlashInfer tuner caches"
    )
    record.add_argument(
        "--from",
        dest="sources",
        action="append",
        required=True,
        metavar="CACHE",
        help="v1 JSON file, v2 store directory, or a vLLM or SGLang cache directory (its "
        "files of the installed FlashInfer and --device); repeat to merge several (one per "
        "rank, or several restarts): per bucket the majority runner and tactic wins, then the "
        "runner's enumerator order",
    )
    record.add_argument("--out", help="write the table here (.toml or .json); default: stdout")
    record.add_argument(
        "--device",
        help="the arch the caches were tuned on (default: FI_PATCHES_DEVICE, else this GPU's)",
    )
    record.set_defaults(run=run_record)
    diff = verbs.add_parser(
        "diff", help="compare tuner caches or pin tables per bucket; exit 1 if any differ"
    )
    diff.add_argument(
        "inputs",
        nargs="+",
        metavar="CACHE_OR_TABLE",
        help="two or more; a vLLM or SGLang cache directory stands for its files",
    )
    diff.add_argument(
        "--device",
        help="the arch of a vLLM or SGLang cache directory's files (default: this one)",
    )
    diff.set_defaults(run=run_diff)
    check = verbs.add_parser(
        "check", help="validate a pin table here; exit 1 if any entry is invalid"
    )
    check.add_argument("table", help="a .toml or .json pin table")
    check.set_defaults(run=run_check)


def _record_device(requested: str | None) -> tuple[str | None, str]:
    """The arch to record for, or None and the message saying why there is none."""
    from fi_patches.compat.target import arch_error, current_device, normalize_arch

    if requested:
        arch = normalize_arch(requested)
        if arch is None:
            return None, (
                f"--device {arch_error(requested)}: give the compute capability the caches "
                "were tuned on, such as sm_100 (B200) or sm_103 (GB300)"
            )
        return arch, ""
    arch = current_device().arch
    if arch is None:
        return None, (
            "this machine has no CUDA device to take the arch from; say which arch the caches "
            "were tuned on with --device sm_103"
        )
    return arch, ""


def _bucket_of() -> Any:
    """``mm_mxfp8``'s row-to-bucket map, or None where FlashInfer cannot say (not installed):
    keys of the MXFP8 runners are then recorded and compared as ``[[pin]]`` keys."""
    from fi_patches.pinning.validate import mxfp8_bucket_of

    try:
        return mxfp8_bucket_of()
    except Exception:
        return None


def _file_form_drift() -> str:
    """Where the installed FlashInfer's cache writers no longer write what fi_patches reads
    (the boundary's file-form probes fail), that clause; else ''."""
    from fi_patches.compat.features import flashinfer_unusable
    from fi_patches.internals import tuner as fi_tuner

    if flashinfer_unusable() is not None:
        return ""
    forms = (fi_tuner.SAVE_CONFIGS, fi_tuner.V2_PUBLISH)
    failed = [p for i in forms if not i.optional or i.present() if (p := i.probe())]
    return f", and the installed FlashInfer's cache form changed: {failed[0]}" if failed else ""


def _flashinfer_missing() -> str:
    """Why FlashInfer gives no bucket map here, as the end of a sentence."""
    from fi_patches.compat.features import flashinfer_unusable

    return flashinfer_unusable() or "FlashInfer here has no mm_mxfp8 tuning config"


def run_record(args: argparse.Namespace) -> int:
    import json

    from fi_patches._atomic import OutputError, check_output, overwrites_input, write_all
    from fi_patches._text import section_counts
    from fi_patches.compat.features import installed_flashinfer
    from fi_patches.internals import tuner as fi_tuner
    from fi_patches.pins.reading import PIN_SUFFIXES, PinTableError
    from fi_patches.tools.merge import bucket_label, merge, provenance, rule_counts, runner_order
    from fi_patches.tools.record import (
        TunerCacheError,
        dumps,
        is_fallback,
        read_cache,
        section_of,
        to_table,
    )

    clash = overwrites_input([("--out", args.out)], [("--from", s) for s in args.sources])
    if clash:
        print(f"pins record: {clash}", file=sys.stderr)
        return 2
    if args.out:
        try:
            check_output(args.out, PIN_SUFFIXES)
        except OutputError as exc:
            print(f"pins record: --out {exc}", file=sys.stderr)
            return 2
    device, problem = _record_device(args.device)
    if device is None:
        print(f"pins record: {problem}", file=sys.stderr)
        return 2
    try:
        sources, described = _sources(list(dict.fromkeys(args.sources)), device)
        read = [(s.label, *read_cache(s.path)) for s in sources]
    except TunerCacheError as exc:
        print(f"pins record: {exc}", file=sys.stderr)
        return 1
    paths = [s.label for s in sources]
    for path, entries, _ in read:
        if not entries:
            print(
                f"pins record: {path} holds no tuned entry (no key of FlashInfer's form)"
                f"{_file_form_drift()}; nothing written",
                file=sys.stderr,
            )
            return 1
    field = fi_tuner.METADATA_VERSION
    versions = {p: str(m[field]) for p, _, m in read if m.get(field)}
    if len(set(versions.values())) > 1:
        listed = ", ".join(f"{p}: {v}" for p, v in versions.items())
        print(
            f"pins record: the caches were tuned on different FlashInfer releases ({listed}); "
            "merge caches of one release",
            file=sys.stderr,
        )
        return 1
    try:
        bucket_of = _bucket_of()
        merged, votes, keys = merge(
            [(path, entries) for path, entries, _ in read], runner_order(int(device[3:]))
        )

        def where(vote: Any) -> str:
            from fi_patches.pins.keys import SECTION
            from fi_patches.tools.merge import from_entries

            key = next(iter(from_entries([vote.tuned], bucket_of).found))
            if key[0] == SECTION:  # a [[pin]] bucket: its lane, as pins diff labels it
                op, profile, lane = vote.decision
                key = (SECTION, op, profile, lane)
            return bucket_label(key, bucket_of)

        note = provenance(paths, votes, keys, where) if len(paths) > 1 else ""
        version = next(iter(versions.values()), None) or installed_flashinfer().version_text
        table = to_table(
            merged,
            device=device,
            flashinfer_version=str(version),
            source=f"recorded from {_source_text(args.sources, sources, described)}",
            bucket_of=bucket_of,
            note=note,
        )
    except PinTableError as exc:
        print(f"pins record: the recorded table is not valid here: {exc}", file=sys.stderr)
        return 1
    mapping = table.to_mapping()
    as_json = Path(args.out or "").suffix.lower() == ".json"
    try:
        text = json.dumps(mapping, indent=2) + "\n" if as_json else dumps(mapping)
    except TypeError as exc:
        print(f"pins record: {exc} (--out FILE.json)", file=sys.stderr)
        return 2
    fallback = sum(1 for _, tuned, _ in read for e in tuned if is_fallback(e.tactic))
    skipped = (
        f"; {fallback} cached winners were FlashInfer's default tactic (-1), left unpinned"
        if fallback
        else ""
    )
    summary = (
        f"{keys - len(votes)} of {keys} buckets agree; {len(votes)} disagreed, decided "
        f"{rule_counts(votes)} (see [meta] note)"
        if votes
        else f"all {keys} buckets agree"
    )
    if bucket_of is None and any(section_of(e.key) for _, entries, _ in read for e in entries):
        print(
            f"pins record: note: {_flashinfer_missing()}, so the MXFP8 runners' entries are "
            "written as [[pin]] entries; the [[low_latency]], [[cute_dsl]] and [[wide]] "
            "sections need its tuner's row buckets",
            file=sys.stderr,
        )
    disagreements = [f"  {v.describe(where(v))}" for v in votes]
    if args.out:
        try:
            write_all([(args.out, text)])
        except OutputError as exc:
            print(f"pins record: --out {exc}", file=sys.stderr)
            return 2
        counts = section_counts(mapping)
        print(f"wrote {args.out}: {counts}" + (f" ({summary})" if len(paths) > 1 else "") + skipped)
        print("\n".join(disagreements), end="\n" if disagreements else "")
    else:
        print(text, end="")
        if len(paths) > 1 or skipped:
            print("\n".join([f"pins record: {summary}{skipped}", *disagreements]), file=sys.stderr)
    return 0


def _sources(inputs: list[str], device: str | None) -> tuple[list[Any], dict[str, str]]:
    """The caches ``inputs`` stand for (a vLLM or SGLang directory: its files of the installed
    FlashInfer and ``device``)."""
    from fi_patches.compat.features import installed_flashinfer
    from fi_patches.tools.server_caches import expand

    return expand(inputs, installed_flashinfer().version_text, device)


def _source_text(inputs: list[str], sources: list[Any], described: dict[str, str]) -> str:
    """The table's ``[meta] source``: each input, a server's cache directory by the directory
    it resolved to."""
    if not described:
        return ", ".join(s.label for s in sources)
    parts = [described.get(text, text) for text in dict.fromkeys(inputs)]
    return ", ".join(parts)


def run_diff(args: argparse.Namespace) -> int:
    from fi_patches.pins.reading import PinTableError
    from fi_patches.tools.merge import (
        NeedsBuckets,
        bucket_label,
        cell_text,
        differing,
        read_choices,
    )
    from fi_patches.tools.record import TunerCacheError

    bucket_of = _bucket_of()
    try:
        device = _diff_device(args.device)
        sources, _ = _sources(list(args.inputs), device)
        if len(sources) < 2:
            print("pins diff: give two or more tuner caches or pin tables", file=sys.stderr)
            return 2
        choices = [read_choices(str(s.path), bucket_of) for s in sources]
    except (TunerCacheError, PinTableError) as exc:
        print(f"pins diff: {exc}", file=sys.stderr)
        return 2
    except NeedsBuckets as exc:
        print(f"pins diff: {exc}, and {_flashinfer_missing()}", file=sys.stderr)
        return 2
    diffs, total = differing(choices)
    if diffs:
        rows = [(bucket_label(d.key, bucket_of), *(cell_text(v) for v in d.values)) for d in diffs]
        print(render(("bucket", *(s.label for s in sources)), rows))
    print(f"{len(diffs)} of {total} buckets differ")
    return 1 if diffs else 0


def _diff_device(requested: str | None) -> str | None:
    """The arch server cache directories are read for: ``--device``, else this machine's, else
    none (then a vLLM or SGLang cache directory is refused with the reason)."""
    from fi_patches.tools.record import TunerCacheError

    if requested is None:
        from fi_patches.compat.target import current_device

        return current_device().arch
    device, problem = _record_device(requested)
    if device is None:
        raise TunerCacheError(problem)
    return device


def run_check(args: argparse.Namespace) -> int:
    from fi_patches.pins.reading import PinTableError
    from fi_patches.pins.table import PinTable
    from fi_patches.tools.check import INVALID, OK, UNCHECKED, check_entries, check_meta

    try:
        table = PinTable.from_file(args.table)
    except PinTableError as exc:
        print(f"pins check: invalid pin table: {exc.one_line()}")
        return 1
    (meta_state, meta_reason), (_, results) = check_meta(table), check_entries(table)
    print(
        f"{args.table}: chosen on {table.meta.device}, FlashInfer {table.meta.flashinfer or 'any'}"
    )
    print(f"meta: {meta_reason}")
    rows = [
        (f"[[{r.section}]] #{r.index}", r.shape, r.rows, r.tactic, r.state, r.reason)
        for r in results
    ]
    if rows:
        print(render(("entry", "weight", "rows", "tactic", "state", "reason"), rows))
    if meta_state == INVALID or any(r.state == INVALID for r in results):
        return 1
    return 3 if meta_state != OK or any(r.state == UNCHECKED for r in results) else 0
