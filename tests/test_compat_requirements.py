"""A feature's requirement on another distribution (the vLLM features' on vLLM), checked with
FlashInfer's gates, against real installed distributions (``wrapt``, a dependency of
fi_patches, stands in for vLLM)."""

from __future__ import annotations

import importlib.metadata

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_patches.compat.device import Device
from fi_patches.compat.evaluate import _evaluate
from fi_patches.compat.feature import Feature, Requirement
from fi_patches.compat.probes import CallableProbe, ModuleProbe
from fi_patches.compat.requirements import check_requirement

WRAPT = Version(importlib.metadata.version("wrapt"))
PROBES = (ModuleProbe("wrapt"), CallableProbe("wrapt", "register_post_import_hook", ("hook",)))


def wrapt_requirement(verified: str, probes=PROBES) -> Requirement:
    return Requirement("wrapt", "wrapt", "wrapt", SpecifierSet(verified), probes)


def passing_check(device: Device) -> str | None:
    return None


def failing_check(device: Device) -> str | None:
    return "it misbehaves"


@pytest.mark.parametrize(
    ("verified", "probes", "reason"),
    [
        (f"=={WRAPT}", PROBES, None),
        (
            "<=1.0",
            PROBES,
            f"wrapt {WRAPT} is newer than the verified range <=1.0 "
            "(all 2 probes pass; set FI_PATCHES_ALLOW_UNVERIFIED=1 to enable it).",
        ),
        (
            f">{WRAPT}",
            PROBES,
            f"wrapt {WRAPT} is outside the verified range >{WRAPT} (all 2 probes pass).",
        ),
        (
            f"=={WRAPT}",
            (CallableProbe("wrapt", "register_post_import_hook", ("callback",)),),
            f"wrapt {WRAPT} lacks an internal it needs: wrapt.register_post_import_hook changed "
            "signature: expected (callback, ...), found (hook, name).",
        ),
    ],
)
def test_a_requirement_is_gated_like_flashinfer(verified, probes, reason):
    check = check_requirement(wrapt_requirement(verified, probes))
    assert check.reason == reason
    assert check.version == str(WRAPT)


def test_a_missing_distribution_and_an_allowed_newer_one(monkeypatch):
    missing = Requirement("no-such-dist", "no_such_module", "Nothing", SpecifierSet("==1"))
    assert check_requirement(missing).reason == "Nothing (no-such-dist) is not installed."
    monkeypatch.setenv("FI_PATCHES_ALLOW_UNVERIFIED", "1")
    check = check_requirement(wrapt_requirement("<=1.0"))
    assert check.reason is None and check.unverified


def feature(requires, self_check="passing_check", uses_flashinfer=False, devices=()) -> Feature:
    return Feature(
        name="demo",
        summary="",
        verified=SpecifierSet(),
        devices=devices,
        probes=(),
        self_check=f"tests.test_compat_requirements:{self_check}",
        requires=requires,
        uses_flashinfer=uses_flashinfer,
    )


def test_a_feature_without_flashinfer_or_device_is_decided_by_its_requirement(monkeypatch):
    ok = _evaluate(feature((wrapt_requirement(f"=={WRAPT}"),)), None, None)
    assert ok.enabled
    assert ok.reason == f"wrapt {WRAPT} is verified; 2 probes and the self-check pass."
    assert (ok.flashinfer, ok.device, ok.verified) == ("-", "any", f"wrapt=={WRAPT}")
    bad = _evaluate(feature((wrapt_requirement(f"=={WRAPT}"),), "failing_check"), None, None)
    assert not bad.enabled
    assert bad.reason == f"self-check failed on wrapt {WRAPT}: it misbehaves"
    monkeypatch.setenv("FI_PATCHES_ALLOW_UNVERIFIED", "1")
    newer = _evaluate(feature((wrapt_requirement("<=1.0"),)), None, None)
    assert newer.enabled
    assert newer.reason == (
        f"wrapt {WRAPT} is unverified (verified: <=1.0); enabled by "
        "FI_PATCHES_ALLOW_UNVERIFIED=1 because all 2 probes and the self-check pass."
    )


def test_a_failed_requirement_comes_before_flashinfer_and_the_device():
    missing = Requirement("no-such-dist", "no_such_module", "Nothing", SpecifierSet("==1"))
    record = _evaluate(
        feature((missing,), uses_flashinfer=True, devices=("sm_103",)),
        None,
        Device(None, "none", "no CUDA device"),
    )
    assert not record.enabled
    assert record.reason == "Nothing (no-such-dist) is not installed."
