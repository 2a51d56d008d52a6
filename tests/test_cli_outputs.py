"""The command line's output files and streams, run as a user runs it (``python -m fi_patches``
in a child process, most on the fork server): a path that cannot be written is one line on
stderr naming it, exit 2, and no file written; outputs land all together or not at all; a
closed stdout ends quietly; a directory argument reads only the cache layouts docs/pins-cli.md
documents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fi_patches.chain.plan import sidecar_path
from tests.chain_helpers import cpu_only

pytestmark = pytest.mark.release_independent  # output paths are checked before FlashInfer is asked

ROOT = Path(__file__).resolve().parent.parent

V1_CACHE = {
    "_metadata": {"flashinfer_version": "0.7.4"},
    "('mxfp8_gemm', 'CutedslLowLatencyBlockscaledGemmRunner', ((8, 1536), (1536, 7168), (-1,)), "
    "(<class 'cutlass.base_dsl.typing.Float8E4M3FN'>, torch.bfloat16, True))": [
        "CutedslLowLatencyBlockscaledGemmRunner",
        [128, 8, 1, 1],
    ],
}
"""A v1 cache file with one low-latency winner, in FlashInfer's key spelling."""

LOW_LATENCY_CHAIN = """
[chain]
name = "one-op"
repeats = 1

[[bucket]]
min_rows = 5
max_rows = 8

[[op]]
name = "wq_b"
n = 6144
k = 1536
runner = "low_latency"
"""


def cli(server, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    """``python -m fi_patches ARGS`` on the fork server (a fresh interpreter's start, torch
    preloaded), as ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    environ = {**os.environ, "FI_PATCHES_DEVICE": "sm_103", **(env or {})}
    return server.run(["-m", "fi_patches", *args], environ, cwd or os.getcwd(), timeout=600)


def one_line(result, *named: str) -> str:
    """stderr, asserted to be one line naming each of ``named``, without a traceback."""
    err = result.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for name in named:
        assert name in err, err
    return err


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def cache(tmp_path) -> Path:
    path = tmp_path / "inputs" / "rank0.json"
    path.parent.mkdir()
    path.write_text(json.dumps(V1_CACHE))
    return path


@pytest.mark.parametrize("where", ["missing folder", "a directory", "yaml suffix"])
def test_pins_record_refuses_an_output_it_cannot_write_in_one_line(
    tmp_path, cache, where, forkserver
):
    out = {
        "missing folder": tmp_path / "nonexistent" / "dir" / "x.toml",
        "a directory": tmp_path / "out.toml",
        "yaml suffix": tmp_path / "x.yaml",
    }[where]
    if where == "a directory":
        out.mkdir()
    before = files_in(tmp_path)
    result = cli(
        forkserver, "pins", "record", "--from", str(cache), "--out", str(out), "--device", "sm_103"
    )
    assert result.returncode == 2, result.stderr
    err = one_line(result, str(out))
    assert err.startswith("pins record: --out ")
    if where == "yaml suffix":
        assert "must end in .toml or .json" in err
    assert files_in(tmp_path) == before  # nothing written, not even a temp file
    assert result.stdout == ""


@cpu_only
def test_tune_checks_every_output_before_it_times_anything(tmp_path, forkserver):
    chain = tmp_path / "chain.toml"
    chain.write_text(LOW_LATENCY_CHAIN)
    timings = tmp_path / "timings.json"
    timings.write_text("{}")  # never read: the outputs are refused first
    missing = tmp_path / "nonexistent" / "x.toml"
    result = cli(
        forkserver, "tune", "--chain", str(chain), "--out", str(missing), "--timings", str(timings)
    )
    assert result.returncode == 2
    one_line(result, str(missing))
    folder = tmp_path / "pins.toml"
    folder.mkdir()
    before = files_in(tmp_path)
    result = cli(
        forkserver, "tune", "--chain", str(chain), "--out", str(folder), "--timings", str(timings)
    )
    assert result.returncode == 2
    one_line(result, str(folder), "is a directory")
    assert files_in(tmp_path) == before  # no pins.provenance.json beside it
    saved = tmp_path / "gone" / "t.json"
    result = cli(
        forkserver,
        "tune",
        "--chain",
        str(chain),
        "--out",
        str(tmp_path / "p.toml"),
        "--save-timings",
        str(saved),
    )
    assert result.returncode == 2
    one_line(result, str(saved))
    assert files_in(tmp_path) == before


def test_tune_writes_its_outputs_all_together_or_not_at_all(tmp_path):
    """A sidecar path that is a directory (the table's would be fine): nothing is written."""
    from fi_patches._atomic import OutputError, write_all

    table = tmp_path / "pins.toml"
    sidecar_path(table).mkdir()
    before = files_in(tmp_path)
    with pytest.raises(OutputError, match=r"pins\.provenance\.json: is a directory"):
        write_all([(table, "x = 1\n"), (sidecar_path(table), "{}\n")])
    assert files_in(tmp_path) == before
    write_all([(tmp_path / "a.toml", "a = 1\n"), (tmp_path / "b.json", "{}\n")])
    assert (tmp_path / "a.toml").read_text() == "a = 1\n"
    assert files_in(tmp_path) == sorted([*before, "a.toml", "b.json"])


@cpu_only
def test_validate_refuses_a_report_it_cannot_write(tmp_path, forkserver):
    report = tmp_path / "nonexistent" / "r.md"
    result = cli(forkserver, "validate", "--report", str(report))
    assert result.returncode == 2
    one_line(result, str(report))
    assert result.stdout == ""


def test_a_closed_stdout_ends_doctor_quietly(tmp_path):
    env = {**os.environ, "FI_PATCHES_CACHE_DIR": str(tmp_path / "cache")}
    child = subprocess.Popen(
        [sys.executable, "-m", "fi_patches", "doctor"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone before doctor prints (as `| head` leaves it)
    err = child.stderr.read().decode()
    assert child.wait(timeout=600) == 141  # 128 + SIGPIPE, as docs/pins-cli.md documents
    assert err == ""


def test_pins_diff_reads_only_the_documented_layouts_of_a_directory(tmp_path, cache, forkserver):
    stray = tmp_path / "tree"
    (stray / "a" / "b" / "c").mkdir(parents=True)
    (stray / "a" / "b" / "c" / "autotune_configs.json").write_text(json.dumps(V1_CACHE))
    result = cli(forkserver, "pins", "diff", str(cache), str(stray))
    assert result.returncode == 2
    err = one_line(result, str(stray), "holding no tuner cache")
    assert "autotune_configs.json" in err and "rank_tp" in err  # the layouts it reads
    # vLLM's layout: <dir>/<config hash>/autotune_configs.json, one input per file
    vllm = tmp_path / "vllm"
    (vllm / "3f2a").mkdir(parents=True)
    (vllm / "3f2a" / "autotune_configs.json").write_text(json.dumps(V1_CACHE))
    result = cli(forkserver, "pins", "diff", str(cache), str(vllm))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("0 of 1 buckets differ")
    # SGLang's: rank_tp<T>_pp<P>_dp<D>.json per rank
    sglang = tmp_path / "sglang"
    sglang.mkdir()
    other = dict(V1_CACHE)
    key = next(k for k in other if not k.startswith("_"))
    other[key] = ["CutedslLowLatencyBlockscaledGemmRunner", [256, 4, 1, 1]]
    (sglang / "rank_tp0_pp0_dp0.json").write_text(json.dumps(V1_CACHE))
    (sglang / "rank_tp1_pp0_dp0.json").write_text(json.dumps(other))
    result = cli(forkserver, "pins", "diff", str(sglang))
    assert result.returncode == 1, result.stderr
    assert "rank_tp0_pp0_dp0.json" in result.stdout and "rank_tp1_pp0_dp0.json" in result.stdout
    assert "[256,4,1,1]" in result.stdout


def test_a_directory_that_vanishes_is_one_line(tmp_path, cache, forkserver):
    gone = tmp_path / "gone"
    gone.mkdir()
    script = (
        "import shutil, sys\n"
        "from pathlib import Path\n"
        "from fi_patches.tools import record\n"
        "real = Path.glob\n"
        "def vanish(self, pattern):\n"
        "    shutil.rmtree(self, ignore_errors=True)\n"
        "    return real(self, pattern)\n"
        "Path.glob = vanish\n"  # the folder goes away between the check and the listing
        "from fi_patches.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = ["-c", script, "pins", "diff", str(cache), str(gone)]
    result = forkserver.run(argv, dict(os.environ), os.getcwd(), timeout=600)
    assert result.returncode == 2
    one_line(result, str(gone))


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_written_files_follow_the_umask_and_an_overwritten_file_keeps_its_mode(tmp_path, cache):
    """A lockfile a server running as another user must read: new files get the umask's mode,
    not ``mkstemp``'s 0600, and writing over a file keeps the mode it had."""
    record = ["pins", "record", "--from", str(cache), "--device", "sm_103", "--out"]
    for umask, expected in ((0o022, 0o644), (0o027, 0o640)):
        out = tmp_path / f"umask{umask:o}.toml"
        result = subprocess.run(
            [sys.executable, "-m", "fi_patches", *record, str(out)],
            capture_output=True,
            text=True,
            check=False,
            umask=umask,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr
        assert mode_of(out) == expected, oct(mode_of(out))
        assert result.stdout == f"wrote {out}: 1 [[low_latency]] entry\n"  # not "1 low_latency"
    lockfile = tmp_path / "umask22.toml"
    lockfile.chmod(0o644)
    result = subprocess.run(
        [sys.executable, "-m", "fi_patches", *record, str(lockfile)],
        capture_output=True,
        text=True,
        check=False,
        umask=0o077,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert mode_of(lockfile) == 0o644  # not narrowed to 0600 by the rewrite
    # validate --report writes the markdown and the JSON beside it the same way
    report = tmp_path / "r.md"
    result = subprocess.run(
        [sys.executable, "-m", "fi_patches", "validate", "--report", str(report)],
        capture_output=True,
        text=True,
        check=False,
        umask=0o022,
        timeout=600,
    )
    assert result.returncode in (0, 1, 3), result.stderr
    assert mode_of(report) == mode_of(report.with_suffix(".json")) == 0o644


def test_tunes_table_and_sidecar_follow_the_umask(tmp_path):
    """``tune`` writes its table, sidecar and timings through ``write_all``; with a real umask
    set (and restored), new files get its mode and an existing one keeps its own."""
    from fi_patches._atomic import write_all

    table = tmp_path / "tuned.toml"
    old = os.umask(0o002)
    try:
        write_all([(table, "a = 1\n"), (sidecar_path(table), "{}\n")])
        assert mode_of(table) == mode_of(sidecar_path(table)) == 0o664
        table.chmod(0o640)
        os.umask(0o077)
        write_all([(table, "a = 2\n"), (tmp_path / "new.json", "{}\n")])
    finally:
        os.umask(old)
    assert table.read_text() == "a = 2\n"
    assert mode_of(table) == 0o640
    assert mode_of(tmp_path / "new.json") == 0o600  # the umask asked for it


def test_an_output_that_is_one_of_the_inputs_is_refused_before_anything_is_read(
    tmp_path, cache, forkserver
):
    """``--out`` naming an input (the same path, a symlink to it, or a relative path from
    elsewhere) is refused with exit 2 before any input is read: the cache is left as it was."""
    garbage = tmp_path / "inputs" / "broken.json"
    garbage.write_text("{ not json")  # reading it would fail with another message
    link = tmp_path / "link.json"
    link.symlink_to(cache)
    before = {p: p.read_bytes() for p in (cache, garbage)}
    (tmp_path / "elsewhere").mkdir()
    attempts = [
        (["--from", str(cache), "--out", str(cache)], None),
        (["--from", str(cache), "--out", str(link)], None),
        (["--from", "../inputs/rank0.json", "--out", "../elsewhere/../inputs/rank0.json"], "x"),
        (["--from", str(garbage), "--from", str(cache), "--out", str(garbage)], None),
    ]
    for args, relative in attempts:
        cwd = tmp_path / "elsewhere" if relative else None
        result = cli(forkserver, "pins", "record", "--device", "sm_103", *args, cwd=cwd)
        assert result.returncode == 2, (args, result.stderr)
        err = one_line(result, "--out", "is the same file as the input --from")
        assert err.startswith("pins record: ")
        assert result.stdout == ""
    assert {p: p.read_bytes() for p in (cache, garbage)} == before


def test_an_output_inside_an_input_directory_is_refused(tmp_path, forkserver):
    """``--from`` a cache directory (a v2 store here, the shipped example's copy) with ``--out``
    inside it is refused with exit 2 before anything is read or written: the table would land
    among the cache's own files, where the next run (or FlashInfer) reads it as one."""
    import shutil

    from fi_patches import examples

    store = tmp_path / "store"
    shutil.copytree(Path(examples.__file__).parent / "tuner_store", store)

    def tree() -> list[str]:
        return sorted(str(p.relative_to(store)) for p in store.rglob("*"))

    before = tree()
    for out in (store / "pins.toml", store / "v2" / "pins.json"):
        result = cli(forkserver, "pins", "record", "--device", "sm_103", "--from", str(store),
                     "--out", str(out))  # fmt: skip
        assert result.returncode == 2, (out, result.stderr)
        err = one_line(result, "--out", "is inside the input directory --from")
        assert err.startswith("pins record: ")
        assert result.stdout == ""
    assert tree() == before


@cpu_only
def test_tune_and_validate_refuse_an_output_that_is_an_input(tmp_path, forkserver):
    chain = tmp_path / "chain.toml"
    chain.write_text(LOW_LATENCY_CHAIN)
    timings = tmp_path / "timings.json"
    timings.write_text("{}")
    pins = tmp_path / "pins.json"
    pins.write_text("{}")
    before = files_in(tmp_path)
    cases = [
        ("tune", "--chain", str(chain), "--out", str(chain)),
        ("tune", "--chain", str(chain), "--out", "p.toml", "--timings", str(timings),
         "--save-timings", str(timings)),
        ("tune", "--chain", str(chain), "--out", "p.toml", "--pins", str(pins),
         "--save-timings", str(pins)),
        ("validate", "--pins", str(pins), "--report", str(tmp_path / "pins.md")),
    ]  # fmt: skip
    for args in cases:
        result = cli(forkserver, *args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        one_line(result, "is the same file as the input")
    assert files_in(tmp_path) == before
    assert timings.read_text() == pins.read_text() == "{}"


def test_help_names_the_program_as_invoked_in_plain_text(tmp_path):
    """``fi-patches --help`` says ``usage: fi-patches``, ``python -m fi_patches --help`` says
    that; neither, nor ``fi-patches-run --help``, shows reStructuredText's double backticks."""
    scripts = {}
    entries = (
        ("fi-patches", "fi_patches.cli", "main"),
        ("fi-patches-run", "fi_patches.cli.install", "run_main"),
    )
    for name, module, function in entries:
        script = tmp_path / name  # what the console-script entry point does
        script.write_text(f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n")
        scripts[name] = script
    for args, usage in (
        ([str(scripts["fi-patches"]), "--help"], "usage: fi-patches "),
        ([str(scripts["fi-patches"]), "hook", "--help"], "usage: fi-patches hook "),
        (["-m", "fi_patches", "--help"], "usage: python -m fi_patches "),
        ([str(scripts["fi-patches-run"]), "--help"], "usage: fi-patches-run "),
    ):
        result = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, check=False, timeout=600
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(usage), result.stdout
        assert "``" not in result.stdout, result.stdout
