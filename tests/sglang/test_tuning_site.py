"""The SGLang plugin's self-check reads the installed SGLang's tuning module: it passes on
SGLang 0.5.23's own file and names what changed on copies of it edited as a release could."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "sglang.srt.plugins", reason="SGLang is not installed here (`nox -s sglang` runs these tests)"
)

from fi_patches.internals import sglang as upstream


@pytest.fixture
def source() -> str:
    path = upstream.autotune_source()
    assert path is not None
    return path.read_text(encoding="utf-8")


def test_sglangs_own_tuning_module_passes():
    path = upstream.autotune_source()
    assert path is not None and path.name == "flashinfer_autotune.py"
    assert upstream.tuning_site_problem(path) is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # the setter bound at import time: fi_patches' guard would not be what it calls
        (
            "    from flashinfer.autotuner import (\n        get_autotune_process_group,\n"
            "        set_autotune_process_group,\n    )\n",
            "    from flashinfer.autotuner import get_autotune_process_group\n",
            "no longer imports set_autotune_process_group from flashinfer.autotuner",
        ),
        ("def _autotune_process_group(", "def _tune_group(", "_autotune_process_group is gone"),
        ("def should_run_flashinfer_autotune(", "def _gate(", "should_run_flashinfer_autotune"),
        ('f"rank_tp{', 'f"tp{', "no longer builds the rank file layout (no 'rank_tp')"),
    ],
    ids=["setter-bound-early", "site-renamed", "gate-renamed", "layout-changed"],
)
def test_an_edited_tuning_module_is_named(source, tmp_path: Path, old, new, expected):
    assert old in source
    edited = tmp_path / "flashinfer_autotune.py"
    edited.write_text(source.replace(old, new), encoding="utf-8")
    problem = upstream.tuning_site_problem(edited)
    assert problem is not None and expected in problem, problem
