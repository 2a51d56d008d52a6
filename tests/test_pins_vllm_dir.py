"""``pins record`` and ``pins diff`` on vLLM's tuner cache tree, ``$VLLM_CACHE_ROOT/
flashinfer_autotune_cache/<FlashInfer version>/<archs>/<config hash>/autotune_configs.json``:
the cache root, ``flashinfer_autotune_cache`` and a release's directory each stand for the
``<archs>`` directory of the installed FlashInfer (or the release given) and the target arch.
The files are written by FlashInfer's own tuner (the tests' op, profiling simulated), at the
paths vLLM builds from FlashInfer's own JIT workspace directory name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fi_patches.cli import main
from fi_patches.pins import PinTable
from tests import toy_op

CACHE = "flashinfer_autotune_cache"


def workspace(monkeypatch: pytest.MonkeyPatch, archs: str) -> tuple[str, str]:
    """``(version, archs)``: the last two parts of FlashInfer's JIT workspace directory for the
    CUDA archs ``archs`` (``"10.3"``), which vLLM names its cache directories by."""
    from flashinfer.jit import env

    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", archs)
    found = env._get_workspace_dir_name()
    return found.parent.name, found.name


def tune(flashinfer: Any, monkeypatch: pytest.MonkeyPatch, seed: int, path: Path) -> None:
    """One vLLM start's tuning: FlashInfer's tuner writes its v1 file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    toy_op.start(monkeypatch, seed)
    with flashinfer.autotune(True, cache=str(path)):
        toy_op.warm_up()


@pytest.fixture
def vllm_root(engine, monkeypatch, tmp_path) -> tuple[Path, Path, list[Path]]:
    """A ``VLLM_CACHE_ROOT`` with two starts (two config hashes) of this FlashInfer on sm_103,
    and files of another release and of another arch that must not be read."""
    version, arch = workspace(monkeypatch, "10.3")
    assert (version, arch) == (engine.__version__, "103a")  # FlashInfer's own naming
    _, other_arch = workspace(monkeypatch, "10.0")
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST")
    root = tmp_path / "vllm"
    here = root / CACHE / version / arch
    files = [here / h / "autotune_configs.json" for h in ("3f2a", "9c1e")]
    for seed, path in zip((1, 2), files, strict=True):
        tune(engine, monkeypatch, seed, path)
    for where in (root / CACHE / "0.7.2" / arch, root / CACHE / version / other_arch):
        tune(engine, monkeypatch, 3, where / "77aa" / "autotune_configs.json")
    return root, here, files


def record(source: Path, out: Path, device: str = "sm_103") -> int:
    return main(["pins", "record", "--device", device, "--from", str(source), "--out", str(out)])


def pins(out: Path) -> list[dict[str, Any]]:
    return [e.to_mapping() for e in PinTable.from_file(out).entries("pin")]


@pytest.mark.simulated
def test_each_level_of_vllms_tree_reads_the_files_of_this_release_and_arch(
    vllm_root, tmp_path, capsys
):
    root, here, files = vllm_root
    direct = tmp_path / "direct.toml"
    args = ["pins", "record", "--device", "sm_103", "--out", str(direct)]
    assert main([*args, "--from", str(files[0]), "--from", str(files[1])]) == 0
    summary = capsys.readouterr().out.splitlines()[0].partition(": ")[2]
    for level in (root, root / CACHE, root / CACHE / here.parent.name, here):
        out = tmp_path / f"{level.name}.toml"
        assert record(level, out) == 0, capsys.readouterr().err
        said = capsys.readouterr().out
        assert said.splitlines()[0] == f"wrote {out}: {summary}"
        assert pins(out) == pins(direct)
        assert "from 3f2a/autotune_configs.json" in said  # each file by its path under here
        if level != here:  # the tree's levels name the directory they resolved to
            source = f"recorded from {here} (2 vLLM tuner caches)"
            assert PinTable.from_file(out).meta.source == source
    assert main(["pins", "diff", "--device", "sm_103", str(root)]) == 1
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header == ["bucket", "3f2a/autotune_configs.json", "9c1e/autotune_configs.json"]


@pytest.mark.simulated
def test_a_release_directory_given_is_read_on_the_arch_asked(vllm_root, tmp_path, capsys):
    root, here, _ = vllm_root
    old = root / CACHE / "0.7.2"
    out = tmp_path / "old.toml"
    assert record(old, out) == 0
    source = f"recorded from {old / here.name} (1 vLLM tuner caches)"
    assert PinTable.from_file(out).meta.source == source


@pytest.mark.simulated
def test_an_arch_of_its_own_is_preferred_to_a_shared_one(
    vllm_root, engine, monkeypatch, tmp_path, capsys
):
    root, here, _ = vllm_root
    version, shared = workspace(monkeypatch, "9.0 10.3")
    assert shared == "90a_103a"
    tune(engine, monkeypatch, 4, root / CACHE / version / shared / "51bd" / "autotune_configs.json")
    out = tmp_path / "pins.toml"
    assert record(root, out) == 0
    assert PinTable.from_file(out).meta.source == f"recorded from {here} (2 vLLM tuner caches)"
    assert record(root, out, device="sm_90") == 0  # sm_90 has only the shared directory
    assert PinTable.from_file(out).meta.source.startswith(f"recorded from {here.parent / shared}")
    _, another = workspace(monkeypatch, "9.0 10.0")
    tune(
        engine, monkeypatch, 5, root / CACHE / version / another / "0d0d" / "autotune_configs.json"
    )
    capsys.readouterr()
    assert record(root, out, device="sm_90") == 1  # two shared ones: which is not guessed
    assert capsys.readouterr().err == (
        f"pins record: {root / CACHE}/{version} holds the tuner caches of 2 arch directories "
        f"for sm_90 ({another}, {shared}): pass the directory of one\n"
    )


@pytest.mark.simulated
def test_no_directory_of_this_release_and_arch_is_one_line_naming_what_there_is(
    vllm_root, engine, monkeypatch, tmp_path, capsys
):
    root, _, _ = vllm_root
    for level in (root, root / CACHE):
        assert record(level, tmp_path / "pins.toml", device="sm_120") == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith(
            f"pins record: {level} holds no vLLM tuner cache of FlashInfer "
            f"{engine.__version__} on sm_120 (no {root / CACHE}/{engine.__version__}/<arch>/"
            "<config hash>/autotune_configs.json for sm_120; it holds 0.7.2/103a, "
            f"{engine.__version__}/100a, {engine.__version__}/103a)"
        ), err
    assert not (tmp_path / "pins.toml").exists()
    # without an arch to pick by (no --device, and this machine has no GPU), it says so
    from fi_patches.compat import refresh

    monkeypatch.delenv("FI_PATCHES_DEVICE")
    refresh()
    assert main(["pins", "diff", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pins diff: {root} is a vLLM cache directory, but no arch"), err
    assert "pass --device, or the directory of one release and arch itself" in err
