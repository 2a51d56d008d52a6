"""The nox sessions' venvs: where ``.ci/run`` asks (``NOX_DISCARD_ENVS``), a cell or host
session removes its venv when it ends, passed or failed; otherwise the venv stays for ``-R``."""

from __future__ import annotations

import functools
import importlib.util
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.release_independent


@functools.cache
def noxfile() -> types.ModuleType:
    """``noxfile.py``, loaded once (loading registers its sessions with nox)."""
    spec = importlib.util.spec_from_file_location("fi_patches_noxfile", ROOT / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def session_with_venv(tmp_path: Path) -> types.SimpleNamespace:
    """What ``_discards_venv`` reads of a nox session: its venv's location (a real folder)."""
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "site.py").write_text("")
    return types.SimpleNamespace(virtualenv=types.SimpleNamespace(location=str(venv)))


def test_ci_removes_a_sessions_venv_when_it_ends_even_on_failure(tmp_path, monkeypatch):
    module = noxfile()
    monkeypatch.setenv(module.DISCARD, "1")
    passed, failed = session_with_venv(tmp_path / "a"), session_with_venv(tmp_path / "b")
    seen: list[tuple[bool, str]] = []

    @module._discards_venv
    def body(session: types.SimpleNamespace, environment: str) -> None:
        seen.append((Path(session.virtualenv.location).is_dir(), environment))  # there meanwhile

    @module._discards_venv
    def failing(session: types.SimpleNamespace) -> None:
        raise RuntimeError("a failing test run")

    body(passed, environment="0.7.4")
    with pytest.raises(RuntimeError):
        failing(failed)
    assert seen == [(True, "0.7.4")]
    assert not Path(passed.virtualenv.location).exists()
    assert not Path(failed.virtualenv.location).exists()


def test_without_the_variable_the_venv_stays(tmp_path, monkeypatch):
    module = noxfile()
    monkeypatch.delenv(module.DISCARD, raising=False)
    session = session_with_venv(tmp_path)
    module._discards_venv(lambda session: None)(session)
    assert (Path(session.virtualenv.location) / "lib" / "site.py").is_file()


def test_ci_run_asks_for_it():
    module = noxfile()
    assert f"export {module.DISCARD}=1" in (ROOT / ".ci" / "run").read_text()
