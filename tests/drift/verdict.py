"""The verdict on one drift case: what its observation (``child.py``) shows that fi_patches did
wrong, compared with the baseline run (nothing broken). An empty list is a clean case.

A case is clean when:

* every feature that declares the broken internal is enabled at the baseline (else the case
  could show nothing), unless the baseline has it off for the release itself
  (:data:`RELEASE_GATED`: the case is then not applicable here);
* ``doctor --json`` exits 0 and prints JSON;
* every feature that declares the broken internal is disabled, and its reason or one of its
  failed probes (``doctor --json`` lists each) names the internal's path; an optional internal
  (or one needed only from a later release) that is merely absent changes nothing;
* every other feature keeps its baseline state. The one exception is FlashInfer's own use of
  what was broken: a mutation in place cannot update FlashInfer's callers as a real release
  would, so a feature may be disabled by the probe of an internal it does declare when that
  probe's failure names the broken internal (``cannot import name 'autotune_tactics'``). Such
  cases are reported as collateral, never a self-check failure;
* ``pinned_tactics()`` (narrowing and preseeding), ``import fi_patches.auto``, ``disable()`` and
  ``mxfp8.explain`` raise nothing, and fi_patches logs no error;
* ``mxfp8.mm`` raises only from FlashInfer, torch or the CuTe DSL (the launch fails on CPU),
  exactly what it raised at the baseline (the wide route's refusal of CPU tensors), or the
  boundary's ``InternalError`` naming the broken internal when that is the FlashInfer function
  its stock route calls; ``explain`` routes to a feature only while that feature is on;
* FlashInfer's low-latency runner offers its stock list inside a block and under
  ``fi_patches.auto`` while ``pinned_tactics`` is off (the pin while it is on), and its stock
  list after; a preseed block seeds the tuner's cache only while ``preseed`` is on and leaves
  the cache as it found it;
* no FlashInfer attribute differs (by identity) after doctor, each block and ``disable()``.
"""

from __future__ import annotations

import re
from typing import Any

from packaging.version import InvalidVersion, Version

from fi_patches.internals import Declared, OneOf, declared
from tests.drift.cases import Case, must_disable, paths
from tests.drift.child import ROUTE_FEATURES

RELEASE_GATED = re.compile(
    r"is outside the verified range|is newer than the verified range|lacks an internal it "
    r"needs|is not installed"
)
"""Reasons for which a feature is off at the baseline because of what is installed (a release
without the feature, a package absent): its cases cannot run here. Any other reason (a failed
self-check, a probe, the device) at the baseline fails the cases."""

SERVED_BY = "pinned_tactics"
"""The feature of the ``[[low_latency]]`` pin whose lookup the drift child asks for inside a
preseed block: with it and preseed on, FlashInfer's lookup must serve that pin."""

CALLS = ("pinned_tactics", "preseed", "auto", "auto_explain", "disable")
"""The calls that must never raise, whatever is broken."""


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def _records(obs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in obs.get("doctor", {}).get("records") or []}


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two call outcomes agree: the same value, or the same exception and message."""
    if a is None or b is None:
        return a is b
    if "error" in a or "error" in b:
        ea, eb = a.get("error") or {}, b.get("error") or {}
        return (ea.get("type"), ea.get("message")) == (eb.get("type"), eb.get("message"))
    return a == b


def _short(outcome: dict[str, Any] | None) -> str:
    if outcome is None:
        return "nothing"
    if "error" in outcome:
        e = outcome["error"]
        return f"{e['type']}: {e['message'][:160]} (at {e['last_frame']})"
    return str(outcome.get("value", outcome))[:160]


def _harness(obs: dict[str, Any]) -> list[str]:
    if "harness_error" in obs:
        return [f"the case did not run: {obs['harness_error'][-1500:]} (log: {obs.get('log')})"]
    if obs.get("mutation_problem"):
        return [f"the mutation did not take: {obs['mutation_problem']}"]
    return []


def _doctor(obs: dict[str, Any]) -> list[str]:
    doctor = obs.get("doctor", {})
    found = []
    if "error" in doctor:
        found.append(f"doctor raised {_short(doctor)}\n{doctor['error']['traceback']}")
    if doctor.get("rc") != 0:
        found.append(f"doctor exited {doctor.get('rc')!r}, not 0")
    if "json_error" in doctor:
        found.append(f"doctor printed no valid JSON: {doctor['json_error']}")
    return found


def _failed_probes(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in record.get("probes") or () if not p["ok"]]


def _marks(internal: Declared) -> tuple[str, ...]:
    """How FlashInfer's own errors name ``internal``: its path, or its name as Python quotes
    it (``has no attribute 'x'``, ``cannot import name 'x'``, ``name 'x' is not defined``)."""
    options = internal.options if isinstance(internal, OneOf) else (internal,)
    return tuple(m for o in options for m in (o.path, f"'{o.name}'"))


def _collateral(name: str, record: dict[str, Any], internal: Declared) -> str | None:
    """The probe that disabled feature ``name`` although it does not declare ``internal``,
    where that probe is of an internal the feature declares and its failure names
    ``internal``: FlashInfer's own code uses what was broken (a mutation in place cannot
    update FlashInfer's callers the way a real release would). None when there is no such
    evidence."""
    if record["enabled"] or record["reason"].startswith("self-check"):
        return None
    own = {i.path for i in declared() if name in i.features}
    marks = _marks(internal)
    for probe in _failed_probes(record):
        if probe["probe"] in own and any(m in (probe["reason"] or "") for m in marks):
            return f"{name} is off through {probe['probe']}: {probe['reason']}"
    return None


def off_at_baseline(case: Case, base: dict[str, Any]) -> dict[str, str]:
    """The features declaring ``case``'s internal that the baseline has disabled, with why."""
    baseline = _records(base)
    return {
        name: baseline[name]["reason"] if name in baseline else "not reported by doctor"
        for name in case.internal.features
        if not baseline.get(name, {}).get("enabled", False)
    }


def not_applicable(case: Case, base: dict[str, Any]) -> str | None:
    """Why ``case`` cannot run here: every feature declaring its internal is off at the
    baseline for the installed release itself; else None."""
    off = off_at_baseline(case, base)
    if len(off) < len(case.internal.features) or not off:
        return None
    if not all(RELEASE_GATED.search(reason) for reason in off.values()):
        return None
    return "; ".join(f"{name} is off at the baseline: {why}" for name, why in off.items())


def _baseline_off(case: Case, base: dict[str, Any]) -> list[str]:
    return [
        f"{name} is already disabled at the baseline ({why}), so this case cannot show that "
        f"breaking {case.key} disables it"
        for name, why in off_at_baseline(case, base).items()
        if not RELEASE_GATED.search(why)
    ]


def _features(case: Case | None, obs: dict[str, Any], base: dict[str, Any]) -> list[str]:
    records, baseline = _records(obs), _records(base)
    found = []
    version = _version(obs.get("version"))
    disable = set(must_disable(case, version)) if case else set()
    needed = disable if case else {f for i in declared() for f in i.features}
    for name in sorted(needed - set(records)):
        found.append(f"doctor reports no feature {name!r}, which the broken internal declares")
    names = paths(case.internal) if case else ()
    for name, record in records.items():
        before = baseline.get(name)
        if name in disable:
            # the reason names the first failing probe; doctor --json lists every one
            texts = [record["reason"]] + [p["reason"] or "" for p in _failed_probes(record)]
            if record["enabled"]:
                found.append(f"{name} stayed enabled: {record['reason']}")
            elif not any(path in text for path in names for text in texts):
                found.append(
                    f"{name} is disabled, but neither its reason nor a failed probe names "
                    f"{' or '.join(names)}: {record['reason']}"
                )
        elif before is None:
            found.append(f"doctor reports {name}, which the baseline did not")
        elif record["enabled"] != before["enabled"]:
            if case is not None and _collateral(name, record, case.internal):
                continue
            state = "enabled" if record["enabled"] else "disabled"
            found.append(
                f"{name} is {state} though it does not declare the broken internal "
                f"(baseline: {before['reason']}): {record['reason']}"
            )
    return found


def collateral(case: Case, obs: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """The features that do not declare the broken internal but were disabled through
    FlashInfer's own use of it (allowed; reported in the summary)."""
    baseline = _records(base)
    found = []
    for name, record in _records(obs).items():
        before = baseline.get(name)
        if name in case.internal.features or before is None or not before["enabled"]:
            continue
        note = _collateral(name, record, case.internal)
        if note:
            found.append(note)
    return found


def _offered(obs: dict[str, Any], base: dict[str, Any]) -> list[str]:
    offered = obs.get("offered", {})
    outside = offered.get("outside")
    if not outside or outside.get("absent"):
        return []
    found = []
    enabled = _records(obs).get("pinned_tactics", {}).get("enabled", False)
    for phase in ("inside", "auto"):
        expected = base["offered"][phase] if enabled else outside
        if not _same(offered.get(phase), expected):
            state = "on (the pin)" if enabled else "off (the stock list)"
            found.append(
                f"the low-latency runner offered {_short(offered.get(phase))} {phase} the "
                f"block, not what pinned_tactics being {state} gives: {_short(expected)}"
            )
    for phase in ("after_block", "after_auto"):
        if not _same(offered.get(phase), outside):
            found.append(
                f"after the {phase[6:]} the low-latency runner offered "
                f"{_short(offered.get(phase))}, not its stock {_short(outside)}"
            )
    return found


def _tuner_cache(obs: dict[str, Any], base: dict[str, Any]) -> list[str]:
    cache = obs.get("tuner_cache")
    if not cache:
        return []
    found = []
    before, inside, after = cache["before"], cache.get("inside"), cache["after"]
    if after != before:
        found.append(
            f"the preseed block left the tuner's cache changed: {_cache_diff(before, after)}"
        )
    enabled = _records(obs).get("preseed", {}).get("enabled", False)
    if inside is not None and inside != before:
        found.append(f"the preseed block changed the tuner's cache: {_cache_diff(before, inside)}")
    base_served = base.get("tuner_cache", {}).get("served_inside", {}).get("value")
    case_served = obs.get("tuner_cache", {}).get("served_inside", {})
    section_on = _records(obs).get(SERVED_BY, {}).get("enabled")
    seeded = enabled and section_on and base_served is not None and "value" in case_served
    if seeded and case_served["value"] != base_served:
        found.append(
            f"preseed is on, yet FlashInfer's lookup inside its block served "
            f"{case_served['value']} (the baseline's served the pin {base_served})"
        )
    return found


def _cache_diff(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> str:
    changes = []
    for store in sorted(before.keys() | after.keys()):
        old, new = before.get(store, {}), after.get(store, {})
        added = [k for k in new if k not in old]
        gone = [k for k in old if k not in new]
        replaced = [k for k in new if k in old and new[k] != old[k]]
        for what, keys in (("added", added), ("removed", gone), ("replaced", replaced)):
            if keys:
                changes.append(f"{store}: {len(keys)} {what} (e.g. {keys[0][:160]})")
    return "; ".join(changes) or "no entry differs"


def _names_missing(error: dict[str, Any], names: tuple[str, ...]) -> bool:
    """Whether ``error`` is the boundary's :class:`InternalError` naming the broken internal:
    what ``mm`` raises when the FlashInfer function its stock route calls is itself gone."""
    return error["type"].endswith(".InternalError") and any(n in error["message"] for n in names)


def _route(what: str, route: dict[str, Any], baseline: dict[str, Any], obs: dict[str, Any]) -> str:
    """What is wrong with a route ``explain`` chose: the baseline's route while the feature it
    needs is on, else stock."""
    if "error" in route:
        return f"{what} raised {_short(route)}"
    feature = ROUTE_FEATURES.get(baseline.get("value"))
    on = feature is not None and _records(obs).get(feature, {}).get("enabled", False)
    expected = baseline.get("value") if on else "stock"
    return f"{what} chose {route['value']}, not {expected}" if route["value"] != expected else ""


def _mm(case: Case | None, obs: dict[str, Any], base: dict[str, Any]) -> list[str]:
    names = paths(case.internal) if case else ()
    found = []
    auto = obs.get("calls", {}).get("auto_explain")
    if auto is not None and "error" not in auto:
        problem = _route(
            "mxfp8.explain under fi_patches.auto", auto, base["calls"]["auto_explain"], obs
        )
        found += [problem] if problem else []
    for rows, result in obs.get("mm", {}).items():
        baseline = base["mm"][rows]
        problem = _route(f"mxfp8.explain({rows} rows)", result["route"], baseline["route"], obs)
        if problem:
            found.append(problem)
            continue
        error = result["mm"].get("error")
        if (
            error
            and error["from_fi_patches"]
            and not _same(result["mm"], baseline["mm"])
            and not _names_missing(error, names)
        ):
            found.append(
                f"mxfp8.mm({rows} rows) raised from fi_patches: {_short(result['mm'])}\n"
                f"{error['traceback']}"
            )
    return found


def _calls(obs: dict[str, Any]) -> list[str]:
    found = []
    for name in CALLS:
        outcome = obs.get("calls", {}).get(name, {})
        if "error" in outcome:
            found.append(f"{name} raised {_short(outcome)}\n{outcome['error']['traceback']}")
    for phase, changes in obs.get("changes", {}).items():
        for change in changes:
            found.append(f"after {phase}, a FlashInfer attribute differs: {change}")
    for record in obs.get("logged", ()):
        if record["level"] in ("ERROR", "CRITICAL"):
            found.append(
                f"fi_patches logged an error during {record['phase']}: {record['message']}"
            )
    return found


def problems(case: Case | None, obs: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """Everything wrong with ``case``'s observation (``case`` None: the baseline itself)."""
    found = _harness(obs)
    if found or "not_applicable" in obs:
        return found
    found += _doctor(obs)
    found += _baseline_off(case, base) if case else []
    found += _features(case, obs, base)
    found += _calls(obs)
    found += _offered(obs, base)
    found += _tuner_cache(obs, base)
    found += _mm(case, obs, base)
    return found
