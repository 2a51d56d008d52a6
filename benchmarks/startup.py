"""What fi_patches costs a process at start-up, as whole-process wall times against the stock
path measured in the same run (interleaved rounds, medians).

1. Interpreter start in a wheel install (built offline into temp venvs, as tests/test_auto.py
   does): bare ``python -c pass`` in a venv without fi_patches, against the venv holding the
   wheel with ``FI_PATCHES_AUTO`` unset and set (target: <= 10 ms over bare when set, ~0 when
   unset).
2. ``import flashinfer`` against ``import flashinfer; fi_patches.status()``, with the self-check
   cache cold (an empty directory per run) and warm (target: warm ``status()`` <= 10% of
   ``import flashinfer``), and ``import flashinfer`` with ``FI_PATCHES_AUTO=1`` and a warm cache
   and a pin table (the hook evaluates the features and applies the pins as FlashInfer loads).

Run from the repository root (FI_PATCHES_DEVICE=sm_103 targets the device offline):
    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_AUTO_MS = 10.0
TARGET_WARM_STATUS = 0.10

# The test environment's packages for the venv that imports FlashInfer: its .pth lines replayed,
# minus fi_patches' own (an editable finder would shadow the wheel), as tests/test_auto.py does.
REPLAY = """
import os, sys
parent = {parent!r}
sys.path.append(parent)
for name in sorted(os.listdir(parent)):
    if name.endswith(".pth") and "fi_patches" not in name:
        with open(os.path.join(parent, name)) as pth:
            for line in pth:
                if line.startswith(("import ", "import\\t")):
                    exec(line)
"""
PINS = """[meta]
device = "sm_103"
flashinfer = ">=0.7.0"

[[low_latency]]
n = 7168
k = 1536
min_rows = 5
max_rows = 8
tactic = [128, 8, 1, 1]

[[wide]]
n = 7168
k = 1536
tile = 16
tactic = [128, 8, 1, 1]
"""


def _run(args: list[str], **kwargs) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _venv(path: Path) -> tuple[Path, Path]:
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    python = path / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return python, Path(_run([str(python), "-c", code]).strip())


def build(tmp: Path) -> dict[str, Path]:
    """The wheel, and venvs: bare, wheel, wheel with FlashInfer."""
    wheels = tmp / "wheels"
    pip = [sys.executable, "-m", "pip", "-q"]
    _run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
            str(ROOT),
        ]
    )
    wheel = next(wheels.glob("fi_patches-*.whl"))
    pythons = {}
    for name in ("bare", "wheel", "flashinfer"):
        python, site_dir = _venv(tmp / name)
        pythons[name] = python
        if name == "bare":
            continue
        _run([*pip, "install", "--no-deps", "--no-index", "--target", str(site_dir), str(wheel)])
        parent = sysconfig.get_paths()["purelib"]
        if name == "flashinfer":
            (site_dir / "_fi_patches_bench_deps.py").write_text(REPLAY.format(parent=parent))
            (site_dir / "00-bench-deps.pth").write_text("import _fi_patches_bench_deps\n")
    return pythons


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.pop("PYTHONPATH", None)
    env.update(FI_PATCHES_DEVICE="sm_103", **extra)
    return env


def timed(args: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{args} failed:\n{done.stderr[-3000:]}")
    return elapsed * 1e3


def _table(title: str, rows: list[tuple[str, float, str]], stock: float) -> None:
    print(title)
    print(f"{'case':<62}{'median ms':>11}{'delta ms':>10}{'ratio':>8}  target")
    for name, ms, target in rows:
        delta = ms - stock
        print(f"{name:<62}{ms:>11.1f}{delta:>+10.1f}{ms / stock:>8.3f}  {target}")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=15, help="processes per case (>= 15)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="fi_patches_startup_") as name:
        tmp = Path(name)
        pythons = build(tmp)
        warm_cache = tmp / "warm-cache"
        pins = tmp / "pins.toml"
        pins.write_text(PINS)
        status_code = "import flashinfer, fi_patches; fi_patches.status()"
        # The hook must have applied the pins, or the case times nothing.
        auto_code = (
            "import flashinfer, fi_patches.activation as a; "
            "assert a.outcome().startswith('pinning'), a.outcome()"
        )
        fi = str(pythons["flashinfer"])
        # Prime the warm cache once, before timing anything.
        timed([fi, "-c", status_code], _env(FI_PATCHES_CACHE_DIR=str(warm_cache)), tmp)
        cold_dirs = iter(tmp / f"cold-{i}" for i in range(10**6))
        start_cases = {
            "bare": lambda: timed([str(pythons["bare"]), "-c", "pass"], _env(), tmp),
            "unset": lambda: timed([str(pythons["wheel"]), "-c", "pass"], _env(), tmp),
            "auto": lambda: timed(
                [str(pythons["wheel"]), "-c", "pass"], _env(FI_PATCHES_AUTO="1"), tmp
            ),
        }
        import_cases = {
            "import": lambda: timed([fi, "-c", "import flashinfer"], _env(), tmp),
            "cold": lambda: timed(
                [fi, "-c", status_code], _env(FI_PATCHES_CACHE_DIR=str(next(cold_dirs))), tmp
            ),
            "warm": lambda: timed(
                [fi, "-c", status_code], _env(FI_PATCHES_CACHE_DIR=str(warm_cache)), tmp
            ),
            "auto": lambda: timed(
                [fi, "-c", auto_code],
                _env(
                    FI_PATCHES_AUTO="1",
                    FI_PATCHES_CACHE_DIR=str(warm_cache),
                    FI_PATCHES_PINS=str(pins),
                ),
                tmp,
            ),
        }
        times: dict[str, list[float]] = {f"s-{k}": [] for k in start_cases}
        times.update({f"i-{k}": [] for k in import_cases})
        for case in [*start_cases.values(), *import_cases.values()]:
            case()  # each case runs; the page cache and the venvs' bytecode are warm
        for round_ in range(args.runs):
            # Interleaved, with the order rotated each round, so load drifts hit every case.
            order = [(f"s-{k}", f) for k, f in start_cases.items()]
            order += [(f"i-{k}", f) for k, f in import_cases.items()]
            shift = round_ % len(order)
            for key, case in order[shift:] + order[:shift]:
                times[key].append(case())
        med = {k: statistics.median(v) for k, v in times.items()}

    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, wall time per process, median "
        f"of {args.runs} interleaved runs each; FI_PATCHES_DEVICE=sm_103\n"
    )
    bare = med["s-bare"]
    auto_ok = "yes" if med["s-auto"] - bare <= TARGET_AUTO_MS else "NO"
    _table(
        "Interpreter start, wheel install (python -c pass)",
        [
            ("bare venv, no fi_patches (stock)", bare, "-"),
            ("fi_patches wheel, FI_PATCHES_AUTO unset", med["s-unset"], "~0 ms"),
            (
                "fi_patches wheel, FI_PATCHES_AUTO=1",
                med["s-auto"],
                f"<= +{TARGET_AUTO_MS:.0f} ms: {auto_ok}",
            ),
        ],
        bare,
    )
    stock = med["i-import"]
    warm_share = (med["i-warm"] - stock) / stock
    _table(
        "import flashinfer, and fi_patches.status() after it (wheel install)",
        [
            ("import flashinfer (stock)", stock, "-"),
            ("import flashinfer; fi_patches.status(), cold cache", med["i-cold"], "-"),
            (
                "import flashinfer; fi_patches.status(), warm cache",
                med["i-warm"],
                f"status <= {TARGET_WARM_STATUS:.0%} of import: "
                f"{warm_share:.1%} {'yes' if warm_share <= TARGET_WARM_STATUS else 'NO'}",
            ),
            ("import flashinfer, FI_PATCHES_AUTO=1 + pins, warm cache", med["i-auto"], "-"),
        ],
        stock,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
