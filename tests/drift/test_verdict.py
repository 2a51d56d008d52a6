"""The drift verdict on made-up observations: each rule fails a case that breaks it and passes
one that keeps it (so a clean drift run means something), and the snapshot sees a patch left
behind. The features and paths come from the boundary's declarations."""

from __future__ import annotations

import copy
import types
from typing import Any

import pytest

from fi_patches.internals import declared
from tests.drift.cases import Case, by_key, mutations
from tests.drift.snapshot import Snapshot
from tests.drift.verdict import collateral, not_applicable, problems

pytestmark = pytest.mark.release_independent  # no FlashInfer: runs once, in the main run

FEATURES = sorted({f for i in declared() for f in i.features})
CASE = Case("autotune_tactics", "removed")
PATH = by_key(CASE.key).path
OWN = by_key(CASE.key).features


def _record(name: str, enabled: bool = True, reason: str = "verified", **probes: str) -> dict:
    return {
        "name": name,
        "enabled": enabled,
        "reason": reason,
        "probes": [{"probe": p, "ok": False, "reason": r} for p, r in probes.items()],
    }


def _observation(*records: dict[str, Any]) -> dict[str, Any]:
    given = {r["name"]: r for r in records}
    return {
        "version": "0.7.4",
        "doctor": {"rc": 0, "records": [given.get(f) or _record(f) for f in FEATURES]},
        "calls": {"pinned_tactics": {"value": True}, "auto": {"value": None}},
        "changes": {"doctor": []},
        "logged": [],
        "offered": {},
        "mm": {},
    }


BASE = _observation()


def _broken(**overrides: dict[str, Any]) -> dict[str, Any]:
    """The clean outcome of ``CASE``: its features off naming the path, the rest as before."""
    off = [_record(f, False, f"lacks an internal it needs: {PATH} is missing") for f in OWN]
    return _observation(*off, *overrides.values())


def test_the_clean_outcome_is_clean() -> None:
    assert problems(CASE, _broken(), BASE) == []


def test_a_case_whose_feature_is_off_at_the_baseline_fails_unless_the_release_lacks_it() -> None:
    feature = OWN[0]
    failed_check = _observation(_record(feature, False, "self-check failed on FlashInfer 0.7.4"))
    found = problems(CASE, _broken(), failed_check)
    assert any(f"{feature} is already disabled at the baseline" in f for f in found), found
    assert not_applicable(CASE, failed_check) is None
    too_old = "FlashInfer 0.6.18 is outside the verified range >=0.7.0 (all 9 probes pass)."
    release = _observation(*(_record(f, False, too_old) for f in OWN))
    assert problems(CASE, _broken(), release) == []
    assert f"{feature} is off at the baseline: {too_old}" in (not_applicable(CASE, release) or "")
    if len(OWN) > 1:  # one feature still on: the case runs, for that one
        assert not_applicable(CASE, _observation(_record(feature, False, too_old))) is None


def test_a_feature_left_on_or_off_without_naming_the_internal_fails() -> None:
    feature = OWN[0]
    assert "stayed enabled" in problems(CASE, _broken(x=_record(feature)), BASE)[0]
    vague = _record(feature, False, "self-check failed: RuntimeError: drift")
    assert "nor a failed probe names" in problems(CASE, _broken(x=vague), BASE)[0]
    first_of_two = _record(
        feature, False, "lacks an internal (and 1 more)", **{"a.b": "x", PATH: f"{PATH} is gone"}
    )
    assert problems(CASE, _broken(x=first_of_two), BASE) == []


def test_another_feature_may_only_fall_through_its_own_probe_naming_the_internal() -> None:
    others = [f for f in FEATURES if f not in OWN]
    if not others:
        pytest.skip("every feature declares the internal")
    other = others[0]
    own = next(i for i in declared() if other in i.features)
    via_self_check = _record(other, False, "self-check failed: AttributeError: 'autotune_tactics'")
    assert "does not declare" in problems(CASE, _broken(x=via_self_check), BASE)[0]
    unrelated = _record(other, False, "lacks an internal", **{own.path: "returned object"})
    assert problems(CASE, _broken(x=unrelated), BASE)
    through = _record(
        other, False, "lacks an internal", **{own.path: "cannot import name 'autotune_tactics'"}
    )
    observation = _broken(x=through)
    assert problems(CASE, observation, BASE) == []
    assert [other in note for note in collateral(CASE, observation, BASE)] == [True]


def test_an_optional_internal_that_is_absent_changes_nothing() -> None:
    optional = next(i for i in declared() if i.optional and i.features)
    case = Case(optional.key, "removed")
    assert problems(case, BASE, BASE) == []
    off = _record(optional.features[0], False, f"lacks an internal: {optional.path} is missing")
    assert problems(case, _observation(off), BASE)
    broken = [m for m in mutations(optional) if m not in ("removed", "renamed")]
    if broken:  # present but broken is not absent: its features must go off
        assert "stayed enabled" in problems(Case(optional.key, broken[0]), BASE, BASE)[0]


def test_raising_calls_attribute_changes_and_logged_errors_fail() -> None:
    raised = _broken()
    raised["calls"]["auto"] = {
        "error": {"type": "KeyError", "message": "x", "last_frame": "", "traceback": "..."}
    }
    assert "auto raised" in problems(CASE, raised, BASE)[0]
    changed = _broken()
    changed["changes"]["pinned_tactics"] = ["class AutoTuner.search_cache: a -> b"]
    assert "attribute differs" in problems(CASE, changed, BASE)[0]
    logged = _broken()
    logged["logged"] = [{"level": "ERROR", "phase": "auto", "message": "unexpected"}]
    assert "logged an error" in problems(CASE, logged, BASE)[0]


def _mm(route: str, error: dict[str, Any] | None) -> dict[str, Any]:
    return {"16": {"route": {"value": route}, "mm": {"error": error} if error else {"value": 1}}}


def test_mm_may_raise_from_flashinfer_or_as_at_the_baseline_but_not_from_fi_patches() -> None:
    base = copy.deepcopy(BASE)
    ours = {"type": "ValueError", "message": "cpu", "last_frame": "", "from_fi_patches": True}
    base["mm"] = _mm("wide", ours)
    same = _broken()
    same["mm"] = _mm("wide", {**ours, "traceback": ""})
    assert problems(CASE, same, base) == []
    new = _broken()
    new["mm"] = _mm("wide", {**ours, "message": "boom", "traceback": ""})
    assert "raised from fi_patches" in problems(CASE, new, base)[0]
    named = _broken()
    missing = {
        **ours,
        "type": "fi_patches.internals.InternalError",
        "message": f"{PATH} is missing",
    }
    named["mm"] = _mm("wide", {**missing, "traceback": ""})
    assert problems(CASE, named, base) == []
    theirs = _broken()
    theirs["mm"] = _mm("wide", {**ours, "from_fi_patches": False, "message": "CUDA"})
    assert problems(CASE, theirs, base) == []


def test_the_snapshot_sees_an_attribute_replaced_removed_or_added() -> None:
    module = types.ModuleType("flashinfer_drift_probe")
    module.f = lambda: 1  # type: ignore[attr-defined]
    module.g = 2  # type: ignore[attr-defined]

    class Runner:
        def get_valid_tactics(self) -> list[int]:
            return [1]

    snapshot = Snapshot.take((), (module, Runner))
    assert snapshot.changes() == []
    original = Runner.get_valid_tactics
    Runner.get_valid_tactics = lambda self: [2]  # type: ignore[method-assign]
    del module.g  # type: ignore[attr-defined]
    module.h = 3  # type: ignore[attr-defined]
    found = " ".join(snapshot.changes())
    assert "get_valid_tactics" in found and ".g: removed" in found and ".h: added" in found
    Runner.get_valid_tactics = original  # type: ignore[method-assign]
    module.g, module.__dict__["__warningregistry__"] = 2, {}  # type: ignore[attr-defined]
    del module.h  # type: ignore[attr-defined]
    assert snapshot.changes() == []
