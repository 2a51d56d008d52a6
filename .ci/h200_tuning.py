"""The lockfile on a real GPU: FlashInfer's own Hopper GEMMs tuned by FlashInfer's own tuner on
the lent H200 (sm_90), stock and under fi_patches' pins. Run there (results in
docs/results.md); CI cannot run it (no GPU). One fresh process per run:

* ``stock``: tune a decode-like set of shapes (3 weights x every power-of-two row bucket 1..512,
  per op) under ``flashinfer.autotune(True, cache=...)``; three runs give the real divergence
  between fresh tunes on this GPU;
* ``pins record`` turns run 1's cache into a lockfile; ``pins check`` checks it;
* ``pinned``: three more runs under ``fi_patches.pinned_tactics(lockfile)``: every pinned key
  must end with its pin, the tuner must time exactly one tactic per pinned key, the runner must
  be called with the pin when serving, outputs must match ``torch.matmul``; an extra weight that
  the lockfile does not pin is tuned stock; tuning time is compared with the stock runs';
* ``preseed``: one run under ``mode="preseed"`` times nothing for pinned keys.

``python .ci/h200_tuning.py all OUT`` runs everything and writes ``OUT/summary.json`` and
``OUT/summary.md``.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROWS = tuple(1 << i for i in range(10))  # 1 .. 512
WEIGHTS = ((4096, 4096), (7168, 2048), (2112, 7168))  # (n, k)
EXTRA = (1024, 1024)  # a weight no lockfile pins: tuned stock in the pinned runs
OPS = ("mm_bf16:cudnn", "mm_bf16:cublaslt", "bmm_fp8:cublas", "bmm_fp8:cudnn")
TOLERANCE = {"mm_bf16": 2e-2, "bmm_fp8": 3e-2}


# one run, in its own process --------------------------------------------------------------------


def _operands(op: str, rows: int, n: int, k: int, torch: Any) -> tuple[Any, ...]:
    gen = torch.Generator(device="cuda").manual_seed(rows * 7919 + n * 31 + k)
    if op == "mm_bf16":
        a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen).t()
        return a, w
    a = (torch.randn(1, rows, k, device="cuda", generator=gen) / 4).to(torch.float8_e4m3fn)
    w = (torch.randn(1, n, k, device="cuda", generator=gen) / 4).to(torch.float8_e4m3fn)
    return a, w.transpose(-2, -1)


def _call(flashinfer: Any, torch: Any, op: str, backend: str, a: Any, w: Any) -> Any:
    if op == "mm_bf16":
        return flashinfer.mm_bf16(a, w, backend=backend)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return flashinfer.bmm_fp8(a, w, one, one, torch.bfloat16, backend=backend)


def _reference(a: Any, w: Any) -> Any:
    return a.float() @ w.float()


def run_one(kind: str, index: int, out: Path, lockfile: str | None, ops: list[str]) -> None:
    import flashinfer
    import torch
    from flashinfer.autotuner import AutoTuner, TunableRunner

    timed: collections.Counter[tuple[str, tuple[int, ...], tuple[int, ...]]] = collections.Counter()
    served: list[tuple[str, tuple[int, ...], tuple[int, ...], Any]] = []
    profile = AutoTuner._profile_single_kernel
    call = TunableRunner.__call__

    def counting(self: Any, runner: Any, inputs: Any, tactic: Any, *args: Any, **kw: Any) -> Any:
        timed[(type(runner).__name__, tuple(inputs[0].shape), tuple(inputs[1].shape))] += 1
        return profile(self, runner, inputs, tactic, *args, **kw)

    def observing(self: Any, inputs: Any, **kw: Any) -> Any:
        if not AutoTuner.get().is_tuning_mode:
            served.append(
                (
                    type(self).__name__,
                    tuple(inputs[0].shape),
                    tuple(inputs[1].shape),
                    kw.get("tactic"),
                )
            )
        return call(self, inputs, **kw)

    AutoTuner._profile_single_kernel = counting
    TunableRunner.__call__ = observing
    weights = list(WEIGHTS) + ([EXTRA] if kind != "stock" else [])
    result: dict[str, Any] = {"kind": kind, "run": index, "ops": {}}
    import contextlib

    import fi_patches

    for name in ops:
        op, backend = name.split(":")
        cache = out / f"{kind}{index}_{op}_{backend}.json"
        timed.clear()
        served.clear()
        record: dict[str, Any] = {"cache": cache.name}
        block: Any = contextlib.nullcontext()
        if kind == "pinned":
            block = fi_patches.pinned_tactics(lockfile)
        elif kind == "preseed":
            block = fi_patches.pinned_tactics(lockfile, mode="preseed")
        try:
            torch.cuda.synchronize()
            start = time.perf_counter()
            with block as active:
                record["pins_active"] = active is not None
                with flashinfer.autotune(True, cache=str(cache)):
                    for n, k in weights:
                        for rows in ROWS:
                            _call(flashinfer, torch, op, backend, *_operands(op, rows, n, k, torch))
                torch.cuda.synchronize()
                record["tune_s"] = time.perf_counter() - start
                worst = 0.0
                for n, k in weights:
                    for rows in ROWS:
                        a, w = _operands(op, rows, n, k, torch)
                        y = _call(flashinfer, torch, op, backend, a, w).float()
                        ref = _reference(a, w)
                        err = ((y - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
                        worst = max(worst, err)
                record["max_rel_err"] = worst
                record["tolerance"] = TOLERANCE[op]
        except Exception as exc:  # report and go on with the next op
            record["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        record["timed"] = [[r, list(a), list(b), c] for (r, a, b), c in sorted(timed.items())]
        record["served"] = [[r, list(a), list(b), _json(t)] for r, a, b, t in served]
        result["ops"][name] = record
    (out / f"{kind}{index}.json").write_text(json.dumps(result, indent=1))


def _json(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value if isinstance(value, (int, float, str, bool)) or value is None else repr(value)


# the orchestration -----------------------------------------------------------------------------


def _run(args: list[str], log: Path, timeout: float) -> tuple[int, float]:
    start = time.perf_counter()
    with log.open("a") as handle:
        handle.write(f"\n$ {' '.join(args)}\n")
        handle.flush()
        try:
            code = subprocess.run(
                args, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return code, time.perf_counter() - start


def _winners(path: Path) -> dict[str, tuple[str, Any]]:
    from fi_patches.tools.record import read_cache

    if not path.exists():
        return {}
    entries, _ = read_cache(path)
    return {e.key.file_key: (e.runner, e.tactic) for e in entries}


def orchestrate(out: Path, budget: float, ops: list[str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    me = [sys.executable, str(Path(__file__).resolve())]
    deadline = time.perf_counter() + budget
    summary: dict[str, Any] = {
        "ops": ops,
        "rows": list(ROWS),
        "weights": [list(w) for w in WEIGHTS],
    }
    import flashinfer
    import torch

    summary["device"] = torch.cuda.get_device_name()
    summary["flashinfer"] = flashinfer.__version__
    summary["torch"] = torch.__version__
    summary["date"] = time.strftime("%Y-%m-%d")
    walls: dict[str, list[float]] = collections.defaultdict(list)

    def left() -> float:
        return deadline - time.perf_counter()

    record_from = os.environ.get("H200_LOCK_FROM")
    sequence = os.environ.get(
        "H200_SEQUENCE",
        "stock1,stock2,stock3,record,pinned1,preseed1,pinned2,pinned3"
        if not record_from
        else "record,stock1,pinned1,preseed1,pinned2,pinned3,stock2",
    ).split(",")
    lock = out / "lock.toml"
    pins: dict[str, tuple[str, Any]] = {}
    for step in sequence:
        if step == "record":
            source = Path(record_from) if record_from else _merged_stock(out, ops)
            pins = _record(source, lock, log, summary)
            continue
        kind, index = step.rstrip("0123456789"), int(step[len(step.rstrip("0123456789")) :])
        if left() < 60 or (kind != "stock" and not lock.exists()):
            summary.setdefault("skipped", []).append(step)
            continue
        lockfile = str(lock) if kind != "stock" else "-"
        code, wall = _run(
            [*me, "one", kind, str(index), str(out), lockfile, ",".join(ops)], log, left()
        )
        walls[kind].append(wall)
        summary.setdefault("exit", {})[step] = code
    summary["stock_divergence"] = _divergence(out, ops)
    summary["checks"] = _checks(out, ops, pins)
    summary["tuning_ratio"] = _ratios(summary["checks"], ops)
    summary["wall_s"] = {k: [round(v, 1) for v in vs] for k, vs in walls.items()}
    return summary


def _merged_stock(out: Path, ops: list[str]) -> Path:
    """Run 1's caches of every op in one v1 file (FlashInfer's file holds the whole cache)."""
    merged = out / "stock1_all.json"
    data: dict[str, Any] = {}
    for name in ops:
        op, backend = name.split(":")
        source = out / f"stock1_{op}_{backend}.json"
        if source.exists():
            loaded = json.loads(source.read_text())
            data.update({k: v for k, v in loaded.items() if not k.startswith("_")})
            data.setdefault("_metadata", loaded.get("_metadata", {}))
    merged.write_text(json.dumps(data))
    return merged


def _record(source: Path, lock: Path, log: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """``pins record`` and ``pins check`` of ``source``: the lockfile and its pinned keys."""
    fi_patches = [sys.executable, "-m", "fi_patches", "pins"]
    code, _ = _run([*fi_patches, "record", "--from", str(source), "--out", str(lock)], log, 120)
    summary["record_exit"] = code
    code, _ = _run([*fi_patches, "check", str(lock)], log, 300)
    summary["check_exit"] = code
    if not lock.exists():
        return {}
    from fi_patches.pins.table import PinTable

    summary["lock_entries"] = len(PinTable.from_file(lock).entries("pin"))
    return _winners(source)


def _divergence(out: Path, ops: list[str]) -> dict[str, Any]:
    """Per runner, the keys whose (runner, tactic) differ between the stock runs' caches."""
    runs = []
    for i in (1, 2, 3):
        caches = sorted(out.glob(f"stock{i}_*.json"), key=lambda p: p.stat().st_mtime)
        if caches:  # FlashInfer writes its whole cache into each file: the last one holds all
            runs.append(_winners(caches[-1]))
    keys: set[str] = set().union(*runs) if runs else set()
    per: dict[str, Any] = {}
    for key in keys:
        runner = next(r[key][0] for r in runs if key in r)
        row = per.setdefault(runner, {"keys": 0, "differing": 0, "runs": len(runs)})
        row["keys"] += 1
        row["differing"] += int(len({repr(r.get(key)) for r in runs}) > 1)
    return per


def _key_of(pins: dict[str, tuple[str, Any]]) -> dict[tuple[str, int, int, int], Any]:
    """Pinned tactics by ``(runner, rows, k, n)``, as the observed shapes name a key (a 2-D
    ``mm_bf16`` or 3-D ``bmm_fp8`` activation ``(..., rows, k)`` and weight ``(..., k, n)``)."""
    from fi_patches.pins.keys import as_tactic, parse_file_key

    found = {}
    for text, (runner, tactic) in pins.items():
        key = parse_file_key(text)
        if key is not None:
            a, b = key.profile[0], key.profile[1]
            found[(runner, a[-2], a[-1], b[-1])] = as_tactic(tactic)
    return found


def _bucket(rows: int) -> int:
    return 1 << max(0, rows - 1).bit_length()


def _checks(out: Path, ops: list[str], pins: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """Per run and op: tuning time, numerics, and for pinned runs the pinned keys that the
    tuner timed once (or never), that ended with their pin, and the serving calls that ran it."""
    from fi_patches.pins.keys import as_tactic

    checks: dict[str, Any] = {}
    pinned = _key_of(pins)
    for kind, count in (("stock", 3), ("pinned", 3), ("preseed", 1)):
        for i in range(1, count + 1):
            path = out / f"{kind}{i}.json"
            if not path.exists():
                continue
            run = json.loads(path.read_text())
            for name, record in run["ops"].items():
                row: dict[str, Any] = {
                    "tune_s": round(record.get("tune_s", float("nan")), 2),
                    "max_rel_err": record.get("max_rel_err"),
                    "error": record.get("error"),
                }
                timed: collections.Counter[tuple[str, int, int, int]] = collections.Counter()
                extra = 0
                for runner, a, b, c in record["timed"]:
                    if (b[-1], a[-1]) == EXTRA:
                        extra += c
                    else:
                        timed[(runner, a[-2], a[-1], b[-1])] += c
                row["timed_total"] = sum(timed.values())
                row["timed_extra_weight"] = extra
                runners = {r for r, _, _, _ in record["timed"]} | {
                    r for r, _, _, _ in record["served"]
                }
                keys = [k for k in pinned if k[0] in runners]
                if kind != "stock":
                    row["pinned_keys"] = len(keys)
                    row["pinned_keys_timed_once"] = sum(1 for k in keys if timed.get(k) == 1)
                    row["pinned_keys_timed_zero"] = sum(1 for k in keys if timed.get(k, 0) == 0)
                    ends = _key_of(_winners(out / record["cache"]))
                    row["pinned_keys_ending_with_pin"] = sum(
                        1 for k in keys if ends.get(k) == pinned[k]
                    )
                    served = [
                        (runner, _bucket(a[-2]), a[-1], b[-1], tactic)
                        for runner, a, b, tactic in record["served"]
                        if (runner, _bucket(a[-2]), a[-1], b[-1]) in pinned
                    ]
                    row["served_calls"] = len(served)
                    row["served_with_pin"] = sum(
                        1 for r, rows, k, n, t in served if as_tactic(t) == pinned[(r, rows, k, n)]
                    )
                checks[f"{kind}{i}:{name}"] = row
    return checks


def _ratios(checks: dict[str, Any], ops: list[str]) -> dict[str, Any]:
    """Per op: median tuning time of the pinned and preseed runs over the stock runs'."""
    import statistics

    found: dict[str, Any] = {}
    for name in ops:
        times: dict[str, list[float]] = collections.defaultdict(list)
        for label, row in checks.items():
            run, _, op = label.partition(":")
            if op == name and row.get("error") is None and row["tune_s"] == row["tune_s"]:
                times[run.rstrip("0123456789")].append(row["tune_s"])
        if times.get("stock"):
            stock = statistics.median(times["stock"])
            found[name] = {
                kind: round(statistics.median(v) / stock, 3) for kind, v in times.items() if v
            }
            found[name]["stock_s"] = stock
    return found


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"# H200 tuning: {summary.get('device')}, FlashInfer {summary.get('flashinfer')}, "
        f"torch {summary.get('torch')}, {summary.get('date')}",
        "",
        "| runner | keys | differing across the stock runs |",
        "|---|---|---|",
    ]
    for name, d in sorted(summary.get("stock_divergence", {}).items()):
        lines.append(f"| {name} | {d['keys']} | {d['differing']} (of {d['runs']} runs) |")
    lines += [
        "",
        "| op | stock median tune s | pinned / stock | preseed / stock |",
        "|---|---|---|---|",
    ]
    for name, r in summary.get("tuning_ratio", {}).items():
        lines.append(
            f"| {name} | {r['stock_s']} | {r.get('pinned', '-')} | {r.get('preseed', '-')} |"
        )
    lines += [
        "",
        "| run:op | tune s | timed | pinned keys | timed once | ending with pin "
        "| served with pin | max rel err |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in summary.get("checks", {}).items():
        served = f"{row.get('served_with_pin', '-')}/{row.get('served_calls', '-')}"
        lines.append(
            f"| {name} | {row['tune_s']} | {row['timed_total']} "
            f"(+{row['timed_extra_weight']} extra weight) | "
            f"{row.get('pinned_keys', '-')} | {row.get('pinned_keys_timed_once', '-')} | "
            f"{row.get('pinned_keys_ending_with_pin', '-')} | {served} | {row['max_rel_err']} |"
            + (f" error: {row['error']}" if row.get("error") else "")
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["one"]:
        _, kind, index, out, lockfile, ops = argv
        run_one(kind, int(index), Path(out), None if lockfile == "-" else lockfile, ops.split(","))
        return 0
    out = Path(argv[1] if len(argv) > 1 else os.environ.get("OUT", "h200-out"))
    budget = float(os.environ.get("H200_BUDGET_S", "540"))
    ops = os.environ.get("H200_OPS", ",".join(OPS)).split(",")
    summary = orchestrate(out, budget, ops)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
