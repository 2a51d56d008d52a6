"""The lifecycle registry (``fi_patches.startup.LIFECYCLE``): ``disable()``, ``refresh()`` and
``doctor`` iterate over its patch sets, an entry's module is imported only to instrument it, and
uninstrumenting puts the exact original objects back."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import fi_patches
from fi_patches import startup
from fi_patches.cli.install import patch_sets
from tests import lowlat

MODULE = "fi_lifecycle_extra"

EXTRA = '''
"""A patch set of its own, registered from a test: it wraps Target.greet all or nothing."""

from fi_patches.patching import AttributePatch, PatchSet


class Target:
    def greet(self):
        return "stock"


ORIGINAL = vars(Target)["greet"]


def _make(original, gate):
    def greet(self):
        return "patched" if gate.active else original(self)

    return greet


class Extra:
    name = "extra"

    def __init__(self):
        self.patches = None
        self.refreshed = 0

    @property
    def installed(self):
        return self.patches is not None

    def instrument(self):
        if self.patches is None:
            patches = PatchSet([AttributePatch(Target, "greet", _make)])
            patches.apply()
            self.patches = patches

    def uninstrument(self):
        if self.patches is not None:
            self.patches.revert()
            self.patches = None

    def refresh(self):
        self.refreshed += 1


EXTRA = Extra()
'''


@pytest.fixture
def extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real importable module holding a patch set, registered as ``extra``."""
    (tmp_path / f"{MODULE}.py").write_text(textwrap.dedent(EXTRA))
    monkeypatch.syspath_prepend(str(tmp_path))
    startup.register("extra", f"{MODULE}:EXTRA")
    try:
        yield "extra"
    finally:
        startup.unregister("extra")
        sys.modules.pop(MODULE, None)


def test_an_entry_is_not_imported_until_instrumented_and_disable_uninstruments_it(extra):
    assert MODULE not in sys.modules
    assert "extra not loaded" in patch_sets()
    fi_patches.refresh()  # iterates only what is loaded: still not imported
    assert MODULE not in sys.modules

    entry = startup.resolve(extra)
    entry.instrument()
    module = sys.modules[MODULE]
    assert module.Target().greet() == "patched"
    assert entry.installed and "extra installed" in patch_sets()
    fi_patches.refresh()
    assert entry.refreshed == 1

    fi_patches.disable()
    assert not entry.installed and "extra off" in patch_sets()
    assert vars(module.Target)["greet"] is module.ORIGINAL
    assert module.Target().greet() == "stock"


def test_a_name_taken_by_another_target_is_refused(extra):
    with pytest.raises(ValueError, match="lifecycle entry 'extra' is already"):
        startup.register("extra", "somewhere:ELSE")
    with pytest.raises(ValueError, match="'nowhere' is not 'module:attr'"):
        startup.register("other", "nowhere")
    startup.register("extra", f"{MODULE}:EXTRA")  # the same target again: nothing changes


def test_disable_uninstruments_every_builtin_patch_set_to_the_exact_originals(
    pinning, tmp_path, monkeypatch
):
    from flashinfer.autotuner import AutoTuner, TunableRunner

    from fi_patches.internals import tuner as fi_tuner

    n, k = lowlat.SHAPE
    pins = tmp_path / "pins.toml"
    tactic = lowlat.non_split_alternative(n, k, 8)
    pins.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = {n}\nk = {k}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(tactic)}\n"
    )
    monkeypatch.setenv("FI_PATCHES_PINS", str(pins))
    runner = lowlat.runner()
    owners = [TunableRunner, AutoTuner, type(runner)]
    before = [dict(vars(owner)) for owner in owners]
    setters = [(m, vars(m)[fi_tuner.SET_GROUP]) for m in fi_tuner.setter_owners()]
    try:
        fi_patches.enable()
        installed = {name for name, entry in startup.entries() if entry and entry.installed}
        assert {"pinning", "process_pins"} <= installed
        assert lowlat.offered(runner, n, k, 8) == [tactic]
    finally:
        fi_patches.disable()
    assert [name for name, entry in startup.entries() if entry and entry.installed] == []
    for owner, namespace in zip(owners, before, strict=True):
        after = dict(vars(owner))
        assert after.keys() == namespace.keys(), owner
        assert all(after[key] is namespace[key] for key in namespace), owner
    assert all(vars(module)[fi_tuner.SET_GROUP] is setter for module, setter in setters)
    assert lowlat.offered(runner, n, k, 8) == lowlat.stock(n, k, 8)


def test_disable_from_below_leaves_open_blocks_where_activation_was_never_imported(
    pinning, tmp_path
):
    """The rank guard's ``on_mismatch="disable"`` calls ``startup.disable()`` in a process that
    may only ever have opened ``pinned_tactics()`` blocks: those blocks are left too."""
    n, k = lowlat.SHAPE
    pins = tmp_path / "pins.toml"
    pins.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = {n}\nk = {k}\nmin_rows = 5\nmax_rows = 8\n"
        f"tactic = {list(lowlat.non_split_alternative(n, k, 8))}\n"
    )
    code = textwrap.dedent(
        f"""
        import sys
        import fi_patches
        from fi_patches import startup
        from fi_patches.pinning import stack
        from fi_patches.pinning.installation import installed_count
        with fi_patches.pinned_tactics({str(pins)!r}):
            before = ("fi_patches.activation" in sys.modules, len(stack.opened_tables()))
            startup.disable()
            print(before, len(stack.opened_tables()), installed_count())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "(False, 1) 0 0"
