"""The catalog of FlashInfer's ops and runner classes, read from its sources: ops named by a
literal, and ops whose names FlashInfer builds at run time (an f-string, a helper's return
value), which a ``[[pin]]`` must be able to name without being called invalid, while a name no
source builds stays unknown."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fi_patches.cli import main
from fi_patches.internals.catalog import catalog, catalog_of
from fi_patches.pins import PinTable
from tests.conftest import flashinfer_or_skip, require_release_supports

BUILT_IN_0_7_4 = (
    "bf16_tgv_gemm",  # f"{dtype_str}_tgv_gemm", dtype_str = "bf16" if ... else "fp16"
    "fp16_tgv_gemm",
    "svdquant_linear_sm120_routes_v1_tactics_v1",  # _sm120_linear_op_name(...)
    "svdquant_linear_sm120_routes_v2_tactics_v1_pdl",
    "nvfp4_svdquant_gemm_sm120_auto_v1_pdl1_cute0_cutlass1",  # _svdquant_op_name(...) + f"..."
)
NOT_BUILT = (
    "int8_tgv_gemm",  # dtype_str is "bf16" or "fp16" on that path
    "bf16_tgv_gemm_v2",
    "tgv_gemm",
    "svdquant_linear_sm120_routes_v1",  # the helper always adds _tactics_v...
    "an_op_flashinfer_never_tunes",
)


def _catalog_0_7_4():
    flashinfer_or_skip()
    from fi_patches.compat.features import installed_flashinfer

    version = installed_flashinfer().version_text
    if version != "0.7.4":
        pytest.skip(f"the op names checked are FlashInfer 0.7.4's; this is {version}")
    found = catalog()
    assert found is not None
    return found


@pytest.mark.parametrize("op", BUILT_IN_0_7_4)
def test_op_names_flashinfer_builds_at_run_time_are_known(op):
    found = _catalog_0_7_4()
    assert op not in found.literals  # no source spells it whole
    assert found.op_known(op)


@pytest.mark.parametrize("op", NOT_BUILT)
def test_names_no_source_builds_stay_unknown(op):
    assert not _catalog_0_7_4().op_known(op)


def test_literal_op_names_and_factory_classes_are_read(tmp_path):
    found = _catalog_0_7_4()
    assert found.op_known("bf16_gemm") and found.op_known("mxfp8_gemm")
    assert found.defined["TGVGemmRunner"].nested  # built inside a factory
    assert found.defined["TGVGemmRunner"].file == "flashinfer/gemm/gemm_base.py"


FAKE = """
from fake_flashinfer_ops.autotuner import AutoTuner, TunableRunner


def _make_runner():
    class FakeGemmRunner(TunableRunner):
        def get_valid_tactics(self, inputs, profile):
            return [0, 1]

    return FakeGemmRunner()


def _version(m):
    return 3 if m > 8 else 2


def _linear_op_name(m, *, enable_pdl):
    name = f"fake_linear_v{_version(m)}_rows{int(m)}"
    return f"{name}_pdl" if enable_pdl else name


def gemm(a, dtype):
    kind = "bf16" if dtype == "bf16" else "fp16"
    return AutoTuner.get().choose_one(f"{kind}_fake_gemm", [_make_runner()], None, [a])


def linear(a, enable_pdl):
    op = _linear_op_name(a.shape[0], enable_pdl=enable_pdl)
    return AutoTuner.get().choose_one(op, [_make_runner()], None, [a])


def _tuned(custom_op, a):
    return AutoTuner.get().choose_one(custom_op, [_make_runner()], None, [a])


def moe(a, backend):
    _tuned("fake_moe_literal", a)
    return _tuned(custom_op=f"fake_moe_{backend.key}_gemm1", a=a)


def anything(a, name):
    AutoTuner.get().choose_one(name, [_make_runner()], None, [a])  # no caller: unbounded
    return AutoTuner.get().choose_one(f"{a.name}", [_make_runner()], None, [a])  # holes only
"""


def _fake_package(root: Path) -> Path:
    package = root / "fake_flashinfer_ops"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "autotuner.py").write_text(
        "class TunableRunner:\n    pass\n\n\nclass AutoTuner:\n"
        "    @classmethod\n    def get(cls):\n        return cls()\n\n"
        "    def choose_one(self, custom_op, runners, config, inputs):\n"
        "        return runners[0], 0\n"
    )
    (package / "ops.py").write_text(textwrap.dedent(FAKE))
    return package


@pytest.mark.parametrize(
    ("op", "known"),
    [
        ("bf16_fake_gemm", True),
        ("fp16_fake_gemm", True),
        ("int4_fake_gemm", False),  # kind is one of two literals
        ("fake_linear_v3_rows16_pdl", True),
        ("fake_linear_v2_rows4", True),
        ("fake_linear_v3_rowsX", False),  # int(m) is an integer
        ("fake_linear_v3_rows16_pdl_extra", False),
        ("fake_moe_literal", True),
        ("fake_moe_cutlass_gemm1", True),  # a keyword argument's f-string, through a parameter
        ("fake_moe_cutlass_gemm2", False),
        ("anything_at_all", False),  # a name the sources never spell makes nothing known
    ],
)
def test_a_fake_package_s_run_time_op_names(tmp_path, op, known):
    package = _fake_package(tmp_path)
    found = catalog_of(package)
    assert found.op_known(op) is known
    assert found.runner_known("FakeGemmRunner")
    assert found.defined["FakeGemmRunner"].nested


def test_the_fake_package_imports_and_tunes_under_the_names_read(tmp_path, monkeypatch):
    """The fake is real code: its ops run and call choose_one with the names the catalog
    reads as patterns."""
    package = _fake_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    from fake_flashinfer_ops import autotuner, ops

    seen: list[str] = []
    monkeypatch.setattr(
        autotuner.AutoTuner, "choose_one", lambda self, op, *a, **k: seen.append(op)
    )

    class Tensor:
        shape = (16, 4)
        name = "t"

    class Backend:
        key = "cutlass"

    ops.gemm(Tensor(), "bf16")
    ops.linear(Tensor(), True)
    ops.moe(Tensor(), Backend())
    found = catalog_of(package)
    assert seen == [
        "bf16_fake_gemm",
        "fake_linear_v3_rows16_pdl",
        "fake_moe_literal",
        "fake_moe_cutlass_gemm1",
    ]
    assert all(found.op_known(op) for op in seen)


TGV_TABLE = """
[meta]
device = "*"
flashinfer = "{flashinfer}"
on_invalid = "refuse"

[[pin]]
op = "bf16_tgv_gemm"
runner = "TGVGemmRunner"
shapes = [["rows", 4096], [4096, 7168], [0], [0], ["rows", 7168]]
min_rows = 1
max_rows = 16
tactic = 3
"""


def test_pins_check_calls_a_run_time_op_unchecked_not_invalid(tmp_path, capsys):
    _catalog_0_7_4()
    require_release_supports("pinned_ops")
    path = tmp_path / "tgv.toml"
    path.write_text(TGV_TABLE.format(flashinfer="==0.7.4"))
    assert main(["pins", "check", str(path)]) == 3
    out = capsys.readouterr().out
    assert "invalid" not in out
    assert "[[pin]] #1" in out and " unchecked " in out


def test_a_table_from_another_release_pinning_a_run_time_op_is_applied(tmp_path):
    """With ``on_invalid = "refuse"`` one false invalid refused the whole table."""
    import fi_patches

    _catalog_0_7_4()
    require_release_supports("pinned_ops")
    table = PinTable.from_mapping(
        {
            "meta": {"device": "*", "flashinfer": "==0.7.3", "on_invalid": "refuse"},
            "pin": [
                {
                    "op": "bf16_tgv_gemm",
                    "runner": "TGVGemmRunner",
                    "shapes": [["rows", 64], [64, 32]],
                    "max_rows": 8,
                    "tactic": 2,
                }
            ],
        },
        source="lock.toml",
    )
    with fi_patches.pinned_tactics(table) as applied:
        assert [e.op for e in applied.entries("pin")] == ["bf16_tgv_gemm"]
