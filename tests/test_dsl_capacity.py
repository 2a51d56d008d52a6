"""The wide budget's shared-memory capacity comes from the CuTe DSL through the boundary: the
non-deprecated ``cutlass.memory`` query where the DSL has it, else ``cutlass.utils``' (both
declared in ``internals/cute_dsl.py``), else a constant, logged once. FAULT INJECTION: the real
installed DSL, changed in a subprocess."""

from __future__ import annotations

import json
import textwrap

import pytest

from fi_patches.internals import cute_dsl as dsl
from fi_patches.internals import declared
from fi_patches.wide.budget import SMEM_CAPACITY_FALLBACK
from tests.fake_flashinfer import run_python
from tests.forkserver import ForkServer

PROBE = """
import json, logging
records = []

class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()))

logging.getLogger("fi_patches").addHandler(Keep())
logging.getLogger("fi_patches").setLevel(logging.DEBUG)
import cutlass.memory, cutlass.utils
{fault}
from fi_patches.wide.budget import smem_capacity
found = [smem_capacity("sm_100a"), smem_capacity("sm_100"), smem_capacity("sm_103a")]
print(json.dumps({{"found": found, "records": [r for r in records if "capacity" in r[1]]}}))
"""


def _run(server: ForkServer, fault: str) -> dict:
    """PROBE with ``fault`` applied, in a fresh process (a fork of the fork server)."""
    pytest.importorskip("cutlass.memory")
    result = run_python(["-c", PROBE.format(fault=textwrap.dedent(fault))], server=server)
    assert result.returncode == 0, result.stderr[-2000:]
    found: dict = json.loads(result.stdout.splitlines()[-1])
    return found


def test_both_queries_are_declared_the_replacement_preferred():
    keys = [i.key for i in declared()]
    assert "dsl_memory_smem_capacity" in keys and "dsl_smem_capacity" in keys
    assert dsl.MEMORY_SMEM_CAPACITY.path == "cutlass.memory.get_smem_capacity_in_bytes"
    assert dsl.MEMORY_SMEM_CAPACITY.optional  # older DSLs have only cutlass.utils'
    pytest.importorskip("cutlass.memory")
    assert dsl.MEMORY_SMEM_CAPACITY.probe() is None and dsl.SMEM_CAPACITY.probe() is None
    assert dsl.smem_capacity_query() is dsl.MEMORY_SMEM_CAPACITY.resolve()


def test_the_budget_reads_the_replacement_first(forkserver):
    found = _run(forkserver, "cutlass.memory.get_smem_capacity_in_bytes = lambda arch: 1000")
    assert found == {"found": [1000, 1000, 1000], "records": []}


def test_where_the_dsl_has_no_replacement_the_deprecated_query_serves(forkserver):
    found = _run(
        forkserver,
        """
        del cutlass.memory.get_smem_capacity_in_bytes
        cutlass.utils.get_smem_capacity_in_bytes = lambda arch: 2000
        """,
    )
    assert found == {"found": [2000, 2000, 2000], "records": []}


def test_a_failing_query_falls_back_to_the_constant_and_logs_once_per_arch(forkserver):
    found = _run(
        forkserver,
        """
        def broken(arch):
            raise KeyError(arch)

        cutlass.memory.get_smem_capacity_in_bytes = broken
        """,
    )
    assert found["found"] == [SMEM_CAPACITY_FALLBACK] * 3
    assert found["records"] == [
        [
            "WARNING",
            "shared-memory capacity of sm_100: the CuTe DSL's query failed (KeyError: 'sm_100'); "
            f"using {SMEM_CAPACITY_FALLBACK} B",
        ],
        [
            "WARNING",
            "shared-memory capacity of sm_103: the CuTe DSL's query failed (KeyError: 'sm_103'); "
            f"using {SMEM_CAPACITY_FALLBACK} B",
        ],
    ]


def test_without_either_query_the_constant_serves_and_says_so(forkserver):
    found = _run(
        forkserver,
        """
        del cutlass.memory.get_smem_capacity_in_bytes
        del cutlass.utils.get_smem_capacity_in_bytes
        """,
    )
    assert found["found"] == [SMEM_CAPACITY_FALLBACK] * 3
    [[level, message], _] = found["records"]
    assert level == "INFO"
    assert message.startswith(
        "shared-memory capacity of sm_100: the CuTe DSL's query is not there (InternalError: "
        "neither cutlass.memory.get_smem_capacity_in_bytes nor "
        "cutlass.utils.get_smem_capacity_in_bytes is there)"
    )
