"""The verdict on one drift case: what its observation (``child.py``) shows that fi_patches did
wrong, compared with the baseline run (nothing broken). An empty list is a clean case.

A case is clean when ``doctor --json`` exits 0 with JSON; every feature that declares the broken
internal is disabled with a reason naming it (unless the mutation only makes an optional
internal absent, which is allowed); every other feature keeps its baseline state;
``pinned_tactics()``, ``import fi_patches.auto``, ``disable()`` and ``mxfp8.explain`` raise
nothing; ``mxfp8.mm`` raises only what FlashInfer, torch or the CuTe DSL raise (or exactly what
it raised at the baseline, such as the wide route's refusal of CPU tensors); FlashInfer's
low-latency runner offers the stock list while its feature is off (the pin while it is on); and
no FlashInfer attribute differs once each block has exited.
"""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version

from fi_patches.internals import declared
from tests.drift.cases import Case, must_disable, paths
from tests.drift.child import ROUTE_FEATURES

CALLS = ("pinned_tactics", "auto", "auto_explain", "disable")
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
            reasons = [record["reason"]]
            if before is not None and any(not p["ok"] for p in before.get("probes", ())):
                # already off for another internal: this one shows among the failed probes
                reasons += [p["reason"] or "" for p in record.get("probes", ()) if not p["ok"]]
            if record["enabled"]:
                found.append(f"{name} stayed enabled: {record['reason']}")
            elif not any(path in text for path in names for text in reasons):
                found.append(
                    f"{name} is disabled, but its reason does not name {' or '.join(names)}: "
                    f"{record['reason']}"
                )
        elif before is None:
            found.append(f"doctor reports {name}, which the baseline did not")
        elif record["enabled"] != before["enabled"]:
            state = "enabled" if record["enabled"] else "disabled"
            found.append(
                f"{name} is {state} though it does not declare the broken internal "
                f"(baseline: {before['reason']}): {record['reason']}"
            )
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


def _mm(obs: dict[str, Any], base: dict[str, Any]) -> list[str]:
    records = _records(obs)
    found = []
    for rows, result in obs.get("mm", {}).items():
        baseline = base["mm"][rows]
        route = result["route"]
        if "error" in route:
            found.append(f"mxfp8.explain({rows} rows) raised {_short(route)}")
            continue
        feature = ROUTE_FEATURES.get(baseline["route"].get("value"))
        on = feature is not None and records.get(feature, {}).get("enabled", False)
        expected = baseline["route"]["value"] if on else "stock"
        if route["value"] != expected:
            found.append(f"mxfp8.explain({rows} rows) chose {route['value']}, not {expected}")
        error = result["mm"].get("error")
        if error and error["from_fi_patches"] and not _same(result["mm"], baseline["mm"]):
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
    found += _features(case, obs, base)
    found += _calls(obs)
    found += _offered(obs, base)
    found += _mm(obs, base)
    return found
