"""Shared fixtures: a clean fi_patches state per test, the simulated sm_103 device, and skips
that follow the compat matrix (a test needing a feature skips, with the reason, where the
installed FlashInfer disables it)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from packaging.version import Version

from fi_patches._logging import forget_logged
from fi_patches.compat import refresh, status_of
from fi_patches.compat.features import verify_fully
from fi_patches.pins.table import register_pins

# Hypothesis profiles: "ci" (the default) runs 2,000 examples per property from a fixed seed;
# "deep" (pytest --hypothesis-profile=deep) runs 20,000 from a random one (a quarter of either
# for the properties marked ``@costly_examples()``). Neither has a
# per-example deadline: the hostile-input tests assert their own wall bound.
_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
settings.register_profile(
    "ci",
    max_examples=2000,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=_SLOW_IS_FINE,
    print_blob=True,
)
settings.register_profile(
    "deep", max_examples=20_000, deadline=None, suppress_health_check=_SLOW_IS_FINE, print_blob=True
)
settings.load_profile("ci")

# The tests verify fi_patches, as the compat matrix does: every feature evaluation in this
# process runs the verification steps (a serving process takes the matrix's verdict for them;
# tests/test_serving_lean.py runs one).
verify_fully()


def costly_examples(share: int = 4) -> settings:
    """Settings for a property whose every example writes files or runs an event loop: 1/``share``
    of the loaded profile's examples (500 under "ci", from its fixed seed; 5,000 under "deep"),
    which keeps each such test to a few seconds of the README's test run."""
    return settings(max_examples=max(100, settings.default.max_examples // share))


@pytest.fixture(autouse=True)
def clean_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    for var in ("FI_PATCHES_DEVICE", "FI_PATCHES_PINS", "FI_PATCHES_ALLOW_UNVERIFIED"):
        monkeypatch.delenv(var, raising=False)
    # Self-check outcomes: none kept in this process (tests change the device under it), and
    # subprocesses that drop FI_PATCHES_* keep theirs in this test's own directory, never in
    # the developer's home (tests/test_selfcheck_cache.py turns the cache on where it tests it).
    monkeypatch.setenv("FI_PATCHES_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("FI_PATCHES_AUTO", raising=False)
    refresh()
    forget_logged()
    register_pins(None)
    yield
    from fi_patches.pinning import stack
    from fi_patches.pinning.installation import PINNING, installed_count
    from fi_patches.ranks import GUARD

    PINNING.installs = GUARD.installs = 0  # each test counts its own (one warning at 100)

    assert installed_count() == 0, "a test left the pinning wrappers installed"
    assert GUARD.count == 0, "a test left the automatic rank guard installed"
    assert stack.suspended() is None, "a test left pins suspended"
    assert stack.opened_tables() == (), "a test left pin tables active"
    register_pins(None)
    refresh()


def flashinfer_or_skip() -> Any:
    """The real FlashInfer, or a skip naming why it does not import here (a failure where this
    environment's matrix cell expects it to import)."""
    from fi_patches.compat.features import installed_flashinfer

    fi = installed_flashinfer()
    if not fi.present:
        pytest.skip("FlashInfer is not installed")
    if fi.import_error:
        from tests import expected

        cell, how = expected.environment_cell()
        if cell is not None and cell.imports:
            pytest.fail(
                f"import flashinfer fails here ({fi.import_error}), but this environment expects "
                f"it to import ({how})",
                pytrace=False,
            )
        pytest.skip(f"import flashinfer fails here ({fi.import_error})")
    return importlib.import_module("flashinfer")


def _absent(internal: Any) -> bool:
    """Whether a declared internal does not resolve here."""
    from fi_patches.internals import InternalError

    try:
        internal.resolve()
    except InternalError:
        return True
    return False


def require_release_supports(name: str) -> None:
    """Skip, with the reason, unless the installed FlashInfer imports, is in ``name``'s verified
    range and has every internal it probes (as the compat layer counts them: an optional one may
    be absent, a ``since`` one is not needed before its release): only the device and self-check
    gates remain. Where the environment expects the release to support ``name``
    (``tests/expected.py``), fail instead of skipping."""
    from fi_patches.compat.features import feature
    from fi_patches.compat.target import is_verified
    from tests import expected

    flashinfer_or_skip()
    from fi_patches.compat.features import installed_flashinfer

    declared = feature(name)
    version = installed_flashinfer().version
    reason = None
    if version is None or not is_verified(version, declared.verified):
        reason = f"{name} is not verified on FlashInfer {version} ({declared.verified})"
    else:
        parsed = Version(str(version))
        failed = [
            problem
            for probe in declared.internals()
            if not (probe.since is not None and parsed < probe.since)
            and not (probe.optional and _absent(probe))
            if (problem := probe.probe())
        ]
        if failed:
            reason = f"FlashInfer {version} lacks an internal {name} needs: {failed[0]}"
    if reason is None:
        return
    if expected.release_is_expected_to_support(name):
        pytest.fail(
            f"{reason}, but this environment expects the release to support {name} "
            f"({expected.where()})",
            pytrace=False,
        )
    pytest.skip(reason)


@pytest.fixture
def sm103(monkeypatch: pytest.MonkeyPatch) -> str:
    """Target sm_103 (as on GB300) through FI_PATCHES_DEVICE."""
    monkeypatch.setenv("FI_PATCHES_DEVICE", "sm_103")
    refresh()
    return "sm_103"


def require_feature(name: str) -> None:
    """Skip, with the compat layer's reason, where feature ``name`` is disabled as this
    environment expects (``tests/expected.py``: the matrix cell it is, or the README's); where
    it expects the feature enabled, or disabled for another reason, fail with the reason."""
    from tests import expected

    record = status_of(name)
    if record.enabled:
        return
    problem = expected.disabled_is_expected(name, record.reason)
    if problem:
        pytest.fail(problem, pytrace=False)
    pytest.skip(f"{name} is disabled here: {record.reason}")


@pytest.fixture
def pinning(sm103: str) -> str:
    """sm_103 with the real FlashInfer, skipping where ``pinned_tactics`` is disabled."""
    flashinfer_or_skip()
    require_feature("pinned_tactics")
    return sm103


@pytest.fixture
def engine(sm103: str) -> Any:
    """sm_103 with the real FlashInfer (the module), skipping where ``pinned_ops`` (the engine
    that pins any op) is disabled."""
    flashinfer_or_skip()
    require_feature("pinned_ops")
    import flashinfer

    return flashinfer


@pytest.fixture
def tuner(pinning: str) -> Iterator[Any]:
    """FlashInfer's tuner singleton, with an empty cache before and after the test."""
    from flashinfer.autotuner import AutoTuner

    tuner = AutoTuner.get()
    tuner.clear_cache()
    yield tuner
    tuner.clear_cache()


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch, pinning: str) -> Any:
    """The CPU simulation of an sm_103 device (see ``simulation.py``); returns the tuner spy."""
    from tests import simulation

    return simulation.install(monkeypatch)


@pytest.fixture
def both(simulated: Any) -> Any:
    """The simulation with both tuner-pinning features enabled (the cute-dsl one needs the
    simulated device properties), else a skip naming why."""
    refresh()
    require_feature("pinned_tactics")
    require_feature("pinned_cute_dsl")
    return simulated


@pytest.fixture(scope="session")
def forkserver() -> Iterator[Any]:
    """Runs ``python -m``/``-c`` commands in forks of a process that imported torch once
    (:mod:`tests.forkserver`), for tests that run many of them."""
    from tests.forkserver import ForkServer

    server = ForkServer()
    yield server
    server.close()
