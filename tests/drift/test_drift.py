"""Drift: every internal the boundary declares, broken each way that fits it, in the real
installed FlashInfer (one forked process per case, see ``conftest.py`` and ``child.py``).
``python -m pytest tests/drift -k autotune_tactics-removed`` runs one case."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fi_patches.internals import MODULE, OneOf, declared
from tests.drift import pool
from tests.drift.cases import BASELINE, REACTIONS, Case, all_cases, coverage
from tests.drift.child import PINNED_ROWS
from tests.drift.mutate import WRAPPERS
from tests.drift.verdict import RELEASE_GATED, not_applicable, off_at_baseline, problems
from tests.expected import disabled_is_expected


def _fail_unless_expected_off(off: dict[str, str]) -> None:
    """Fail where a feature the baseline has off is expected enabled in this environment (or
    off for another reason): a probe or self-check of ours failing reads like a release
    lacking an internal, and must not turn the drift cases into skips."""
    wrong = [problem for name, why in off.items() if (problem := disabled_is_expected(name, why))]
    if wrong:
        pytest.fail("at the baseline: " + "; ".join(wrong), pytrace=False)


def test_the_baseline_is_clean_and_pins_take_effect(drift) -> None:
    base = drift.observation(BASELINE)
    found = problems(None, base, base)
    assert not found, "\n- ".join(["the baseline:", *found])
    records = {r["name"]: r for r in base["doctor"]["records"]}
    for name in ("pinned_tactics", "preseed"):  # what the pin-effect checks below rely on
        reason = records[name]["reason"]
        if not records[name]["enabled"] and RELEASE_GATED.search(reason):
            _fail_unless_expected_off({name: reason})
            pytest.skip(f"{name} is off for this release, so pins take no effect: {reason}")
        assert records[name]["enabled"], f"the baseline has {name} disabled: {reason}"
    pin = drift.results.table["low_latency"][0]
    assert pin["min_rows"] <= PINNED_ROWS <= pin["max_rows"]
    assert base["offered"]["inside"] == {"value": [pin["tactic"]]}
    assert base["offered"]["auto"] == {"value": [pin["tactic"]]}
    assert len(base["offered"]["outside"]["value"]) > 1
    cache = base["tuner_cache"]
    assert cache["inside"] == cache["before"] == cache["after"]  # answered, never written
    assert cache["served_inside"] == {"value": pin["tactic"]}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=[pytest.mark.newest_release] if c.mutation in REACTIONS else [])
        for c in all_cases()
    ],
    ids=lambda c: c.id,
)
def test_a_broken_internal_disables_its_features_and_nothing_else(drift, case: Case) -> None:
    observation = drift.observation(case.id)
    if "not_applicable" in observation:
        pytest.skip(
            f"absent here (FlashInfer {drift.results.version}): {observation['not_applicable']}"
        )
    gated = not_applicable(case, drift.observation(BASELINE))
    if gated:
        _fail_unless_expected_off(off_at_baseline(case, drift.observation(BASELINE)))
        pytest.skip(f"not applicable here (FlashInfer {drift.results.version}): {gated}")
    found = drift.judge(case)
    assert not found, f"{case.id} ({observation.get('applied')}):\n- " + "\n- ".join(found)


@pytest.mark.release_independent
def test_every_declared_internal_has_the_cases_its_declaration_calls_for() -> None:
    """Read from each declaration itself, not from ``mutations()`` (which makes the cases):
    every internal can be removed; an attribute can be renamed; declared parameters call for
    a signature case, a class found in a factory's body for a rebound one, and a probe that
    exercises the internal for a wrong-shape one; a module or a ``OneOf`` only disappears."""
    cases = all_cases()
    assert len({c.id for c in cases}) == len(cases)
    for internal in declared():
        found = {c.mutation for c in cases if c.key == internal.key}
        assert "removed" in found, internal.key
        assert found <= {"removed", "renamed", *WRAPPERS}, internal.key  # the harness applies each
        if isinstance(internal, OneOf) or internal.kind == MODULE:
            assert found == {"removed"}, internal.key
            continue
        assert "renamed" in found, internal.key
        assert ("signature" in found) == bool(internal.params), internal.key
        assert ("rebound" in found) == bool(internal.builds), internal.key
        assert ("wrong_shape" in found) == (internal.check is not None), internal.key
        assert "raising" not in found or internal.check is not None, internal.key
    assert coverage() == (len(declared()), len(cases))


@pytest.mark.release_independent
def test_a_case_past_its_timeout_is_killed_and_recorded(tmp_path: Path) -> None:
    zygote = pool.Zygote(tmp_path, 0)
    try:
        ready = zygote.ready()
        if "import_error" in ready:
            pytest.skip(f"import flashinfer fails here ({ready['import_error']})")
        job = pool.make_job(tmp_path, "slow", tmp_path / "pins.json", 0.02, job="case")
        started = time.monotonic()
        reply = zygote.run(job)
        assert reply["status"] == "timeout" and "killed after" in reply["detail"]
        assert "harness_error" in pool.read_outcome(job, reply)
        assert time.monotonic() - started < 30
        assert zygote.process.poll() is None  # the zygote serves the next case
    finally:
        zygote.close()


@pytest.mark.release_independent
def test_where_flashinfer_does_not_import_the_run_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fake_flashinfer import write_fake

    monkeypatch.setenv("PYTHONPATH", str(write_fake(tmp_path / "fake", "import_raises")))
    with pytest.raises(
        pool.Unavailable, match=r"^import flashinfer fails here \(RuntimeError: CUDA"
    ):
        pool.run([], tmp_path / "run", workers=1)
