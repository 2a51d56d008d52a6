"""The opt-in import: process-wide pins through a post-import hook, ``disable()``, the
``FI_PATCHES_AUTO`` start-up hook and ``fi-patches-run``, the latter against a real install of
this project's wheel (built offline) into a temp venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import threading
import zipfile
from pathlib import Path

import pytest

import fi_patches
from fi_patches.pinning.installation import installed_count
from tests import lowlat
from tests.conftest import flashinfer_or_skip

N, K = lowlat.SHAPE
ROOT = Path(__file__).resolve().parent.parent


def pins_file(tmp_path: Path, tactic) -> Path:
    path = tmp_path / "pins.toml"
    path.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(tactic)}\n"
    )
    return path


def test_enable_pins_every_thread_and_disable_restores_flashinfer(pinning, tmp_path, monkeypatch):
    from flashinfer.autotuner import AutoTuner, TunableRunner

    pin = lowlat.non_split_alternative(N, K, 8)
    monkeypatch.setenv("FI_PATCHES_PINS", str(pins_file(tmp_path, pin)))
    runner = lowlat.runner()
    originals = (dict(vars(TunableRunner)), dict(vars(AutoTuner)), dict(vars(type(runner))))
    try:
        fi_patches.enable()
        fi_patches.enable()  # idempotent
        assert (
            installed_count() == 1
        )  # the engine's wrappers, held once however often enable() runs
        seen = []
        thread = threading.Thread(target=lambda: seen.append(lowlat.offered(runner, N, K, 8)))
        thread.start()
        thread.join()
        assert seen == [[pin]]
        assert lowlat.offered(runner, N, K, 8) == [pin]
    finally:
        fi_patches.disable()
    assert installed_count() == 0
    assert lowlat.offered(runner, N, K, 8) == lowlat.stock(N, K, 8)
    after = (dict(vars(TunableRunner)), dict(vars(AutoTuner)), dict(vars(type(runner))))
    for before_ns, after_ns in zip(originals, after, strict=True):
        assert before_ns.keys() == after_ns.keys()
        assert all(before_ns[k] is after_ns[k] for k in before_ns)


def test_auto_when_fi_patches_itself_first_imports_flashinfer(pinning, tmp_path, forkserver):
    """``fi_patches.auto`` first, then ``status()``: FlashInfer's first import happens inside
    fi_patches' own probe, whose post-import hook (the activation, and its rank guard) asks for
    the installed FlashInfer again on the same thread. It must not deadlock."""
    pins = pins_file(tmp_path, lowlat.non_split_alternative(N, K, 8))
    code = (
        "import fi_patches.auto, fi_patches\n"
        "assert fi_patches.status()\n"
        "from fi_patches import activation\n"
        "from fi_patches.ranks import GUARD\n"
        "print(activation.outcome(), GUARD.count)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.update(FI_PATCHES_DEVICE="sm_103", FI_PATCHES_PINS=str(pins), PYTHONPATH=str(ROOT))
    result = forkserver.run(["-c", code], env, os.getcwd(), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"pinning the [[low_latency]] entries from {pins} 1"


def test_a_section_auto_ignores_is_blamed_on_the_process_wide_pins(pinning, tmp_path, forkserver):
    """With pins from ``FI_PATCHES_PINS`` applied process-wide, a section whose feature is off
    here is reported as the process-wide pins', not as a ``pinned_tactics()`` call the user
    never made."""
    from fi_patches.compat import status_of

    if status_of("pinned_cute_dsl").enabled:
        pytest.skip("the cute-dsl pins apply here; nothing is ignored")
    pins = pins_file(tmp_path, lowlat.non_split_alternative(N, K, 8))
    pins.write_text(
        pins.read_text() + f"\n[[cute_dsl]]\nn = {N}\nk = {K}\nmax_rows = 64\n"
        "tactic = [[128, 64], [1, 1], true, false, 1]\n"
    )
    code = (
        "import logging\n"
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "import fi_patches.auto, flashinfer\n"
        "from fi_patches import activation\n"
        "print(activation.outcome())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.update(FI_PATCHES_DEVICE="sm_103", FI_PATCHES_PINS=str(pins), PYTHONPATH=str(ROOT))
    result = forkserver.run(["-c", code], env, os.getcwd(), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"pinning the [[low_latency]] entries from {pins}"
    ignored = [line for line in result.stderr.splitlines() if "ignores the" in line]
    assert len(ignored) == 1, result.stderr[-3000:]
    assert ignored[0].startswith(
        f"fi_patches, applying FI_PATCHES_PINS={pins} process-wide, ignores the [[cute_dsl]] pins"
    )
    assert "pinned_tactics" not in result.stderr


# --- a real install in a temp venv ----------------------------------------------------------


DEPENDENCIES = """
import os, sys
parent = {parent!r}
sys.path.append(parent)
for name in sorted(os.listdir(parent)):
    if name.endswith(".pth") and "fi_patches" not in name:
        with open(os.path.join(parent, name)) as pth:
            for line in pth:
                if line.startswith(("import ", "import\t")):
                    exec(line)
"""


@pytest.fixture(scope="session")
def installed_python(tmp_path_factory) -> Path:
    """A temp venv holding this project's wheel, built and installed offline; torch, FlashInfer
    and the other dependencies come from the test environment through a path file."""
    root = tmp_path_factory.mktemp("install")
    wheels = root / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if build.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{build.stderr[-3000:]}")
    venv = root / "venv"
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
    # The test environment's packages, as site would add them, minus its own fi_patches (an
    # editable finder there would shadow the wheel). Named to run before fi_patches_auto.pth.
    (site_dir / "_fi_patches_test_deps.py").write_text(
        DEPENDENCIES.format(parent=sysconfig.get_paths()["purelib"])
    )
    (site_dir / "00-test-dependencies.pth").write_text("import _fi_patches_test_deps\n")
    wheel = next(wheels.glob("fi_patches-*.whl"))
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(site_dir),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if install.returncode != 0:
        pytest.fail(f"installing the wheel failed:\n{install.stderr[-3000:]}")
    (venv / "bin" / "fi-patches-run").write_text(
        f"#!{python}\nimport sys\nfrom fi_patches.cli.install import run_main\nsys.exit(run_main())\n"
    )
    (venv / "bin" / "fi-patches-run").chmod(0o755)
    assert (site_dir / "fi_patches_auto.pth").is_file()
    return python


CONSUMER = """
import json, os, sys
{before}
import flashinfer
from flashinfer.gemm import gemm_base
{after}
import torch
import fi_patches
{offered}def report():
    return {{"pinned": offered(8), "unpinned": len(offered(4)), "fi_patches_from": fi_patches.__file__}}
if __name__ == "__main__":
    if "--spawn" in sys.argv:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        with ctx.Pool(1) as pool:
            child = pool.apply(report)
        print(json.dumps({{"parent": report(), "child": child}}))
    else:
        print(json.dumps(report()))
"""


def consumer(tmp_path: Path, before: str = "", after: str = "") -> Path:
    path = tmp_path / "consumer.py"
    path.write_text(
        textwrap.dedent(
            CONSUMER.format(before=before, after=after, offered=lowlat.offered_source())
        )
    )
    return path


def run(
    python: Path, args: list[str], tmp_path: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    child = {
        k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_") and k != "PYTHONPATH"
    }
    child.update({"FI_PATCHES_DEVICE": "sm_103", **env})
    return subprocess.run(
        args if args[0] != "python" else [str(python), *args[1:]],
        capture_output=True,
        text=True,
        env=child,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )


@pytest.fixture
def pin(pinning) -> tuple[int, ...]:
    return lowlat.non_split_alternative(N, K, 8)


def _stock_count() -> int:
    return len(lowlat.stock(N, K, 4))


@pytest.mark.parametrize(
    ("before", "after"), [("", "import fi_patches.auto"), ("import fi_patches.auto", "")]
)
def test_import_auto_before_or_after_flashinfer(installed_python, tmp_path, pin, before, after):
    script = consumer(tmp_path, before, after)
    result = run(
        installed_python,
        ["python", str(script)],
        tmp_path,
        FI_PATCHES_PINS=str(pins_file(tmp_path, pin)),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["pinned"] == [list(pin)]
    assert report["unpinned"] == _stock_count()
    assert str(ROOT) not in report["fi_patches_from"]  # the installed wheel, not the checkout


def test_fi_patches_auto_activates_an_unmodified_consumer_and_its_spawned_children(
    installed_python, tmp_path, pin
):
    script = consumer(tmp_path)
    env = {"FI_PATCHES_PINS": str(pins_file(tmp_path, pin)), "FI_PATCHES_AUTO": "1"}
    result = run(installed_python, ["python", str(script), "--spawn"], tmp_path, **env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["parent"]["pinned"] == [list(pin)]
    assert report["child"]["pinned"] == [list(pin)]


def test_fi_patches_run_activates_one_command(installed_python, tmp_path, pin):
    script = consumer(tmp_path)
    runner = installed_python.parent / "fi-patches-run"
    result = run(
        installed_python,
        [str(runner), str(installed_python), str(script)],
        tmp_path,
        FI_PATCHES_PINS=str(pins_file(tmp_path, pin)),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pinned"] == [list(pin)]


def test_without_the_variable_the_hook_imports_nothing(installed_python, tmp_path):
    code = (
        "import sys; print(sorted(m for m in sys.modules if m.startswith(('fi_patches', 'wrapt'))))"
    )
    result = run(installed_python, ["python", "-c", code], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_with_the_variable_the_hook_imports_nothing_heavy_until_flashinfer(
    installed_python, tmp_path
):
    flashinfer_or_skip()
    code = (
        "import sys; heavy = ('wrapt', 'asyncio', 'importlib.metadata', 'torch', 'flashinfer', "
        "'fi_patches.activation', 'fi_patches.compat'); "
        "print(sorted(m for m in sys.modules if m.startswith(heavy))); "
        "print([type(f).__name__ for f in sys.meta_path if type(f).__module__ == 'fi_patches.startup']); "
        "import flashinfer; "
        "print([type(f).__name__ for f in sys.meta_path if type(f).__module__ == 'fi_patches.startup']); "
        "print(type(flashinfer.__loader__).__module__ != 'fi_patches.startup', flashinfer.__spec__.loader is flashinfer.__loader__, "
        "'wrapt' in sys.modules)"
    )
    result = run(installed_python, ["python", "-c", code], tmp_path, FI_PATCHES_AUTO="1")
    assert result.returncode == 0, result.stderr
    before, waiting, after, loader = result.stdout.strip().splitlines()
    assert before == "[]"
    assert waiting == "['_Finder']"  # the start-up finder waits for flashinfer
    assert after == "[]"  # and leaves once it fired
    # FlashInfer keeps the loader that imported it (the hook's wrapper is gone from its module
    # and spec); wrapt loads only now, with the first patch installed (the automatic rank
    # guard's setter, a wrapt wrapper), never before FlashInfer (``before`` above)
    assert loader == "True True True"


def _wheel(installed_python: Path) -> Path:
    return next((installed_python.parents[2] / "wheels").glob("fi_patches-*.whl"))


def test_the_wheel_ships_its_data_files(installed_python):
    from fi_patches.chain.spec import EXAMPLES

    with zipfile.ZipFile(_wheel(installed_python)) as wheel:
        names = set(wheel.namelist())
        example = wheel.read("fi_patches/chain/examples/deepseek_v3_tp4.toml").decode()
    assert "fi_patches/py.typed" in names
    assert example == (EXAMPLES / "deepseek_v3_tp4.toml").read_text()
    from fi_patches.examples import ROOT as SHIPPED

    shipped = {
        f"fi_patches/examples/{p.relative_to(SHIPPED).as_posix()}"
        for p in SHIPPED.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped <= names  # the walkthrough's inputs, the v2 store's entries included
    assert any(n.startswith("fi_patches/examples/tuner_store/v2/") for n in shipped)


def test_the_wheel_ships_the_license_and_needs_only_packaging_wrapt_and_tomli_before_3_11(
    installed_python,
):
    with zipfile.ZipFile(_wheel(installed_python)) as wheel:
        names = wheel.namelist()
        licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1
        text = wheel.read(licenses[0]).decode()
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    lines = metadata.decode().splitlines()
    assert "License-Expression: Apache-2.0" in lines
    base = sorted(
        line.split(":", 1)[1].strip()
        for line in lines
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    )
    assert base == ["packaging>=23", 'tomli>=1.1; python_version < "3.11"', "wrapt>=1.14"]


WITHOUT = "wrapt"
"""A pure-Python dependency the serving host lacks (whether or not fi_patches declares it)."""


def _base_requirements() -> list[str]:
    """The names of the base dependencies ``pyproject.toml`` declares for this interpreter
    (a dependency whose marker excludes it, such as tomli before 3.11, is not one)."""
    import tomllib
    from packaging.requirements import Requirement

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = [Requirement(text) for text in declared]
    return sorted(r.name for r in wanted if r.marker is None or r.marker.evaluate())


def _metadata_wheel(folder: Path, name: str, version: str) -> None:
    """A wheel holding only ``name``'s metadata: what pip's resolver reads in a dry run (the
    package index is not reachable from the tests)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)


def test_installing_the_wheel_on_a_serving_host_keeps_its_torch_and_flashinfer(
    installed_python, tmp_path
):
    """A host that has torch, FlashInfer and packaging but not wrapt (this test environment
    minus fi_patches and wrapt): pip's resolver, in a dry run, would install fi_patches and
    exactly those of its declared base dependencies the host lacks."""
    from importlib.metadata import version

    host_site = tmp_path / "host-site"
    host_site.mkdir()
    # Every site directory this environment sees (a compat-matrix cell sees its base's too).
    sites = dict.fromkeys(
        [sysconfig.get_paths()["purelib"], *(p for p in sys.path if p.endswith("site-packages"))]
    )
    for site_dir in sites:
        for entry in Path(site_dir).iterdir():
            taken = (host_site / entry.name).exists()
            if taken or "fi_patches" in entry.name or entry.name.startswith("__editable__"):
                continue
            if entry.name == WITHOUT or entry.name.startswith(f"{WITHOUT}-"):
                continue
            (host_site / entry.name).symlink_to(entry)
    venv = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "00-host.pth").write_text(f"{host_site}\n")
    lacking = subprocess.run(
        [str(python), "-c", f"import importlib.util as u; print(u.find_spec({WITHOUT!r}))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert lacking == "None"  # the host really lacks it
    index = tmp_path / "index"
    index.mkdir()
    (index / _wheel(installed_python).name).symlink_to(_wheel(installed_python))
    declared = _base_requirements()
    host_has = {entry.name.split("-")[0].lower() for entry in host_site.glob("*.dist-info")}
    missing = [name for name in declared if name.lower().replace("-", "_") not in host_has]
    for name in missing:
        _metadata_wheel(index, name, version(name))
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run"]
    dry_run = subprocess.run(
        [*pip, "--no-index", "--find-links", str(index), "--report", str(report), "fi_patches"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert dry_run.returncode == 0, dry_run.stderr
    would = sorted(item["metadata"]["name"] for item in json.loads(report.read_text())["install"])
    assert would == sorted(["fi_patches", *missing]), dry_run.stdout
    assert (WITHOUT in missing) == (WITHOUT in declared)


@pytest.mark.parametrize("problem", ["missing", "malformed"])
def test_bad_pins_log_one_clear_error_and_leave_flashinfer_stock(
    installed_python, tmp_path, pinning, problem
):
    path = tmp_path / "pins.toml"
    if problem == "malformed":
        path.write_text("[meta\n")
    script = consumer(tmp_path)
    result = run(
        installed_python,
        ["python", str(script)],
        tmp_path,
        FI_PATCHES_AUTO="1",
        FI_PATCHES_PINS=str(path),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["pinned"]) == len(lowlat.stock(N, K, 8)) > 1
    errors = [
        line for line in result.stderr.splitlines() if "fi_patches" in line and str(path) in line
    ]
    assert len(errors) == 1, result.stderr
    assert "left FlashInfer stock" in errors[0]
    assert ("cannot be read" if problem == "missing" else "TOML") in errors[0]
