"""A feature's dependency on a package other than FlashInfer (the vLLM features' on vLLM),
checked with FlashInfer's gates, against real installed distributions (``packaging``, a dependency
of fi_patches, stands in for vLLM)."""

from __future__ import annotations

import importlib.metadata

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_patches.compat.features import Feature, check_dependency, evaluate
from fi_patches.compat.target import Device
from fi_patches.internals import Dependency
from fi_patches.internals.flashinfer import FLASHINFER

PACKAGING = Version(importlib.metadata.version("packaging"))


def packaging_dist(verified: str, releases: tuple[str, ...] = (str(PACKAGING),)) -> Dependency:
    return Dependency(
        "packaging", "packaging", SpecifierSet(verified), "packaging", releases=releases
    )


def passing_check(device: Device) -> str | None:
    return None


def failing_check(device: Device) -> str | None:
    return "it misbehaves"


def feature(requires, self_check="passing_check", devices=()) -> Feature:
    # "demo" declares no internals, so its probes are none: the gates under test are the
    # package's presence, import and release.
    return Feature(
        name="demo",
        summary="",
        requires=requires,
        devices=devices,
        self_check=f"tests.test_compat_requirements:{self_check}",
    )


@pytest.mark.parametrize(
    ("verified", "reason"),
    [
        (f"=={PACKAGING}", None),
        (
            "<=1.0",
            f"packaging {PACKAGING} is newer than the verified range <=1.0 "
            "(all 0 probes pass; set FI_PATCHES_ALLOW_UNVERIFIED=1 to enable it).",
        ),
        (
            f">{PACKAGING}",
            f"packaging {PACKAGING} is outside the verified range >{PACKAGING} (all 0 probes pass).",
        ),
    ],
)
def test_a_dependency_is_gated_like_flashinfer(verified, reason):
    dependency = packaging_dist(verified)
    checked = check_dependency(feature((dependency,)), dependency)
    assert checked.problem == reason
    assert checked.version == PACKAGING


def test_a_missing_distribution_and_an_allowed_newer_one(monkeypatch):
    missing = Dependency("no-such-dist", "no_such_module", SpecifierSet("==1"), "Nothing")
    assert check_dependency(feature((missing,)), missing).problem == (
        "Nothing (no-such-dist) is not installed."
    )
    monkeypatch.setenv("FI_PATCHES_ALLOW_UNVERIFIED", "1")
    newer = packaging_dist("<=1.0")
    checked = check_dependency(feature((newer,)), newer)
    assert checked.problem is None and checked.unverified


def test_a_feature_without_flashinfer_or_device_is_decided_by_its_dependency(monkeypatch):
    ok = evaluate(feature((packaging_dist(f"=={PACKAGING}"),)), None)
    assert ok.enabled
    assert ok.reason == f"packaging {PACKAGING} is verified; 0 probes and the self-check pass."
    assert (ok.flashinfer, ok.device, ok.verified) == ("-", "any", f"packaging=={PACKAGING}")
    bad = evaluate(feature((packaging_dist(f"=={PACKAGING}"),), "failing_check"), None)
    assert not bad.enabled
    assert bad.reason == f"self-check failed on packaging {PACKAGING}: it misbehaves"
    monkeypatch.setenv("FI_PATCHES_ALLOW_UNVERIFIED", "1")
    newer = evaluate(feature((packaging_dist("<=1.0"),)), None)
    assert newer.enabled
    assert newer.reason == (
        f"packaging {PACKAGING} is unverified (verified: <=1.0); enabled by "
        "FI_PATCHES_ALLOW_UNVERIFIED=1 because all 0 probes and the self-check pass."
    )


def test_a_release_in_the_range_that_no_matrix_cell_ran_says_so():
    below = f"{PACKAGING.major}.{PACKAGING.minor}.{PACKAGING.micro}rc1"  # listed releases around it
    above = f"{PACKAGING.major + 1}.0"
    inside = packaging_dist(
        f">={below},<={above}", releases=(below, above, f"{PACKAGING.major + 2}.0")
    )
    record = evaluate(feature((inside,)), None)
    assert record.enabled and not record.in_matrix
    assert record.reason == (
        f"packaging {PACKAGING} is not in the compat matrix; between verified {below} and {above}; "
        "0 probes and the self-check pass."
    )
    listed = evaluate(
        feature((packaging_dist(f">={below},<={above}", releases=(str(PACKAGING),)),)), None
    )
    assert listed.enabled and listed.in_matrix
    assert listed.reason == f"packaging {PACKAGING} is verified; 0 probes and the self-check pass."
    alone = evaluate(feature((packaging_dist(f"=={PACKAGING}", releases=()),)), None)
    assert alone.reason.startswith(
        f"packaging {PACKAGING} is not in the compat matrix; no release of "
    )


def test_a_failed_dependency_comes_before_flashinfer_and_the_device():
    missing = Dependency("no-such-dist", "no_such_module", SpecifierSet("==1"), "Nothing")
    record = evaluate(
        feature((missing, FLASHINFER), devices=("sm_103",)), Device(None, "none", "no CUDA device")
    )
    assert not record.enabled
    assert record.reason == "Nothing (no-such-dist) is not installed."
