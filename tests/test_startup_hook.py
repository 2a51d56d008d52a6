"""fi_patches' post-import hooks (``fi_patches.startup.when_imported``, which the start-up hook uses), and ``python -m
fi_patches hook install|uninstall|status`` in an editable install (the README's quick start),
where no ``.pth`` comes with the package.

The finder is exercised on real packages written to a temp dir; the hook command on a temp
venv that sees this checkout through the test environment's editable finder."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from fi_patches import startup
from tests import lowlat

N, K = lowlat.SHAPE


def _package(root: Path, name: str, body: str) -> None:
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("fi14_")]:
        del sys.modules[name]
    for name, hook in list(HOOKS):
        startup.discard(name, hook)
    HOOKS.clear()


HOOKS: list = []


def hook_on(name, callback):
    """Register ``callback`` on the import of ``name`` (discarded after the test)."""
    HOOKS.append((name, callback))
    startup.when_imported(name, callback)


def finders():
    return [f for f in sys.meta_path if type(f).__module__ == startup.__name__]


def test_the_finder_fires_once_after_the_import_and_leaves_no_trace(on_path):
    _package(on_path, "fi14_target", "VALUE = 41\nfrom . import sub\n")
    (on_path / "fi14_target" / "sub.py").write_text("VALUE = 1\n")
    seen = []
    hook_on("fi14_target", lambda m: seen.append((m.__name__, m.VALUE)))
    assert len(finders()) == 1
    import fi14_target

    assert seen == [("fi14_target", 41)]  # after the module body ran, not before
    assert finders() == []
    assert type(fi14_target.__loader__).__name__ == "SourceFileLoader"
    assert fi14_target.__spec__.loader is fi14_target.__loader__
    import importlib

    importlib.reload(fi14_target)
    assert len(seen) == 1


def test_a_failing_import_does_not_fire_and_a_later_one_does(on_path):
    _package(
        on_path,
        "fi14_flaky",
        "import os\nif os.environ.get('FI14_FAIL'):\n    raise RuntimeError('boom')\n",
    )
    seen = []
    hook_on("fi14_flaky", seen.append)
    os.environ["FI14_FAIL"] = "1"
    try:
        with pytest.raises(RuntimeError, match="boom"):
            import fi14_flaky
    finally:
        del os.environ["FI14_FAIL"]
    assert seen == [] and startup.waiting("fi14_flaky")
    import fi14_flaky  # noqa: F401

    assert len(seen) == 1 and not startup.waiting("fi14_flaky") and finders() == []


def test_a_failing_callback_is_logged_and_never_reaches_the_importer(on_path, caplog):
    _package(on_path, "fi14_quiet", "VALUE = 1\n")

    def fails(module):
        raise ValueError("callback broke")

    hook_on("fi14_quiet", fails)
    with caplog.at_level(logging.ERROR, logger="fi_patches.import_hooks"):
        import fi14_quiet

    assert fi14_quiet.VALUE == 1
    assert "hook on the import of fi14_quiet failed" in caplog.text
    assert "callback broke" in caplog.text
    assert not startup.waiting("fi14_quiet") and finders() == []


def test_other_imports_pass_through(on_path):
    _package(on_path, "fi14_other", "VALUE = 2\n")
    seen = []
    hook_on("fi14_absent_target", seen.append)
    import fi14_other

    assert fi14_other.VALUE == 2 and seen == [] and startup.waiting("fi14_absent_target")
    with pytest.raises(ModuleNotFoundError):
        import fi14_absent_target  # noqa: F401
    assert seen == []


def test_hooks_of_several_modules_share_one_finder_and_run_in_order(on_path):
    _package(on_path, "fi14_first", "VALUE = 1\n")
    _package(on_path, "fi14_second", "VALUE = 2\n")
    seen = []
    hook_on("fi14_first", lambda m: seen.append(("a", m.VALUE)))
    hook_on("fi14_first", lambda m: seen.append(("b", m.VALUE)))
    hook_on("fi14_second", lambda m: seen.append(("c", m.VALUE)))
    assert len(finders()) == 1
    import fi14_first  # noqa: F401

    assert seen == [("a", 1), ("b", 1)] and len(finders()) == 1  # fi14_second still waits
    import fi14_second  # noqa: F401

    assert seen == [("a", 1), ("b", 1), ("c", 2)] and finders() == []
    hook_on("fi14_second", lambda m: seen.append(("d", m.VALUE)))  # imported: runs at once
    assert seen[-1] == ("d", 2) and finders() == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *((v, True) for v in ("1", "true", "TRUE", "Yes", " on ")),
        *((v, False) for v in ("0", "false", "False", "no", "OFF", "")),
        ("maybe", None),
    ],
)
def test_the_pth_line_reads_the_variable_as_env_reads_every_boolean(value, expected, tmp_path):
    """The shipped .pth, processed by ``site`` in a new interpreter: on for exactly the values
    ``_env`` reads as on; a value that is not a boolean leaves it off with one warning."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    root = Path(__file__).resolve().parent.parent
    (site_dir / startup.PTH_NAME).write_text((root / startup.PTH_NAME).read_text())
    code = (
        f"import site; site.addsitedir({str(site_dir)!r}); "
        "from fi_patches import _env; from fi_patches.startup import pending; "
        "print(pending(), _env.flag(_env.AUTO), _env.boolean(_env.AUTO))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env[startup.ENV] = value
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    on = bool(expected)
    assert done.stdout.split() == [str(on), str(on), str(expected)]
    assert startup.requested({startup.ENV: value}) is on
    if expected is None:
        assert done.stderr.splitlines() == [
            "FI_PATCHES_AUTO='maybe' is not a boolean (1/true/yes/on for on, 0/false/no/off or "
            "empty for off); using the default (off)"
        ]
    else:
        assert done.stderr == ""


def test_the_start_up_hook_spells_env_booleans():
    from fi_patches import _env

    assert (startup.TRUE_WORDS, startup.FALSE_WORDS) == (_env.TRUE_WORDS, _env.FALSE_WORDS)


def test_the_shipped_pth_is_the_line_hook_install_writes():
    root = Path(__file__).resolve().parent.parent
    assert (root / startup.PTH_NAME).read_text().strip() == startup.PTH_LINE


# --- `hook install|uninstall|status` in an editable install -----------------------------------

REPLAY = """
import os, sys
parent = {parent!r}
sys.path.append(parent)
for name in sorted(os.listdir(parent)):
    if name.endswith(".pth") and name != "fi_patches_auto.pth":
        with open(os.path.join(parent, name)) as pth:
            for line in pth:
                if line.startswith(("import ", "import\\t")):
                    exec(line)
"""


@pytest.fixture
def editable_python(tmp_path) -> Path:
    """A temp venv that sees the test environment's packages, this checkout's editable install
    included (its finder, no fi_patches_auto.pth)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_dir = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site_dir / "_fi14_replay.py").write_text(
        REPLAY.format(parent=sysconfig.get_paths()["purelib"])
    )
    (site_dir / "00-replay.pth").write_text("import _fi14_replay\n")
    return python


CONSUMER = f"""
import json, torch
from flashinfer.gemm import gemm_base
a = torch.empty(8, {K}, dtype=torch.float8_e4m3fn)
b = torch.empty({N}, {K}, dtype=torch.float8_e4m3fn).t()
u8 = torch.empty(1, dtype=torch.uint8)
runner = gemm_base._cutedsl_low_latency_blockscaled_gemm_runner(103, True)
print(json.dumps([list(t) for t in runner.get_valid_tactics([a, b, u8, u8, torch.bfloat16, torch.empty(8, {N}, dtype=torch.bfloat16), u8], None)]))
"""


def _run(python: Path, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    child = {
        k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_") and k != "PYTHONPATH"
    }
    child.update(env)
    return subprocess.run(
        [str(python), *args],
        capture_output=True,
        text=True,
        env=child,
        cwd=cwd,
        timeout=600,
        check=False,
    )


def test_hook_install_status_uninstall_in_an_editable_install(editable_python, tmp_path, pinning):
    pin = lowlat.non_split_alternative(N, K, 8)
    pins = tmp_path / "pins.toml"
    pins.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(pin)}\n"
    )
    consumer = tmp_path / "consumer.py"
    consumer.write_text(CONSUMER)
    auto = {"FI_PATCHES_AUTO": "1", "FI_PATCHES_PINS": str(pins), "FI_PATCHES_DEVICE": "sm_103"}
    cli = ["-m", "fi_patches"]

    status = _run(editable_python, [*cli, "hook", "status"], tmp_path)
    assert status.returncode == 3, status.stdout + status.stderr
    assert "not installed" in status.stdout and "hook install" in status.stdout
    stock = json.loads(_run(editable_python, [str(consumer)], tmp_path, **auto).stdout)
    assert len(stock) > 1  # the variable alone does nothing without the hook

    install = _run(editable_python, [*cli, "hook", "install"], tmp_path)
    assert install.returncode == 0, install.stderr
    pth = Path(install.stdout.split("wrote ", 1)[1].split(";", 1)[0])
    assert pth.name == startup.PTH_NAME and pth.read_text().strip() == startup.PTH_LINE
    again = _run(editable_python, [*cli, "hook", "install"], tmp_path)
    assert again.returncode == 0 and "already installed" in again.stdout

    pinned = _run(editable_python, [str(consumer)], tmp_path, **auto)
    assert pinned.returncode == 0, pinned.stderr
    assert json.loads(pinned.stdout) == [list(pin)]
    status = _run(editable_python, [*cli, "hook", "status"], tmp_path, FI_PATCHES_AUTO="1")
    assert (
        status.returncode == 0
        and "installed (" in status.stdout
        and "apply the default pins" in status.stdout
    )
    doctor = _run(editable_python, [*cli, "doctor"], tmp_path, FI_PATCHES_DEVICE="sm_103")
    assert doctor.returncode == 0, doctor.stderr
    assert f"start-up hook: installed ({pth})" in doctor.stdout
    assert "FI_PATCHES_AUTO is unset: it stays idle" in doctor.stdout

    removed = _run(editable_python, [*cli, "hook", "uninstall"], tmp_path)
    assert removed.returncode == 0 and f"removed {pth}" in removed.stdout and not pth.exists()
    again = _run(editable_python, [*cli, "hook", "uninstall"], tmp_path)
    assert again.returncode == 0 and "not installed" in again.stdout
    assert len(json.loads(_run(editable_python, [str(consumer)], tmp_path, **auto).stdout)) > 1


def test_hook_install_that_cannot_write_exits_1_naming_the_file(editable_python, tmp_path):
    site_dir = editable_python.parent.parent.glob("lib/python*/site-packages")
    blocker = next(site_dir) / startup.PTH_NAME
    blocker.mkdir()  # a directory where the file should go: the write fails, even as root
    result = _run(editable_python, ["-m", "fi_patches", "hook", "install"], tmp_path)
    assert result.returncode == 1
    assert f"hook install: cannot write {blocker}" in result.stderr
    status = _run(editable_python, ["-m", "fi_patches", "hook", "status"], tmp_path)
    assert status.returncode == 3


def test_the_start_up_hook_reads_the_variable_the_settings_module_declares():
    """Observed: the ``.pth`` line, run in a fresh interpreter, installs the hook exactly when
    the variable ``fi_patches._env`` declares is on (whatever ``startup`` calls it)."""
    from fi_patches import _env

    code = (
        f"exec({startup.PTH_LINE!r})\n"
        "import sys\n"
        "hook = sys.modules.get('fi_patches.startup')\n"
        "print(bool(hook and hook.pending()))\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    seen = {}
    for value in ("1", "0", None):
        env = base if value is None else {**base, _env.AUTO.name: value}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        seen[value] = done.stdout.strip()
    assert seen == {"1": "True", "0": "False", None: "False"}


def test_an_orphan_pth_is_silent_once_fi_patches_is_gone(editable_python, tmp_path):
    """``hook install``, then the editable install removed (what ``pip uninstall`` leaves):
    every later interpreter with ``FI_PATCHES_AUTO=1`` starts silently."""
    install = _run(editable_python, ["-m", "fi_patches", "hook", "install"], tmp_path)
    assert install.returncode == 0, install.stderr
    site_dir = next(editable_python.parent.parent.glob("lib/python*/site-packages"))
    assert (site_dir / startup.PTH_NAME).is_file()
    (site_dir / "00-replay.pth").unlink()  # the editable install's finder: fi_patches is gone
    gone = _run(editable_python, ["-c", "import fi_patches"], tmp_path)
    assert gone.returncode == 1 and "No module named 'fi_patches'" in gone.stderr
    for value in ("1", "maybe"):
        started = _run(editable_python, ["-c", "print('started')"], tmp_path, FI_PATCHES_AUTO=value)
        assert (started.returncode, started.stdout, started.stderr) == (0, "started\n", "")
