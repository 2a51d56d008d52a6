"""The tuner caches' file forms are the boundary's: FlashInfer's own writers (``save_configs``,
the v2 store's ``publish``) write a cache of the probe's key, and fi_patches' reader
(``pins record``, through ``fi_patches.internals.tuner``'s accessors) must read back that key
and tactic. A FlashInfer whose writer writes another form disables ``pinned_ops`` with the
reason, ``pins record`` of such a file says why it found nothing, and the drift suite breaks
each writer in turn (FAULT INJECTION: the real installed FlashInfer, patched in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from fi_patches.compat.features import installed_flashinfer
from fi_patches.internals import tuner as fi_tuner
from fi_patches.tools.record import from_v1_file, from_v2_store
from tests.conftest import require_release_supports
from tests.drift.cases import all_cases
from tests.forkserver import ForkServer


def test_flashinfers_own_writers_write_what_fi_patches_reads():
    require_release_supports("pinned_ops")
    assert fi_tuner.SAVE_CONFIGS.probe() is None
    assert fi_tuner.V2_STORE.present() and fi_tuner.V2_PUBLISH.probe() is None


def test_a_cache_the_real_tuner_saves_reads_back_key_and_tactic(tmp_path):
    """The same round trip as the probe, spelled out: the singleton's own cache, saved by
    ``save_configs`` and by a v2 store, read by ``pins record``'s readers."""
    require_release_supports("pinned_ops")
    from flashinfer.autotune_cache import ManagedAutotuneCache
    from flashinfer.autotuner import AutoTuner

    key, ours = fi_tuner.probe_key()
    tuner = AutoTuner()
    tuner.profiling_cache[key] = ((7, (1, False)), None)
    tuner.save_configs(str(tmp_path / "v1.json"))
    entries, meta = from_v1_file(tmp_path / "v1.json")
    assert [(e.key, e.tactic) for e in entries] == [(ours, (7, (1, False)))]
    assert meta[fi_tuner.METADATA_VERSION] == installed_flashinfer().version_text

    store = ManagedAutotuneCache({"flashinfer_version": "x"}, tmp_path / "store")
    store.publish(key.file_key, ours.runner, [7, [1, False]])
    entries, meta = from_v2_store(tmp_path / "store")
    assert [(e.key, e.tactic) for e in entries] == [(ours, (7, (1, False)))]
    assert meta == {"flashinfer_version": "x", "cache_schema": "v2"}


def test_the_drift_suite_breaks_each_writer():
    """Each of FlashInfer's cache writers, taken from FlashInfer itself, is the object some
    drift cases break (found by the drift suite's own path walk, not the boundary's), removed
    and misbehaving: the cases cannot silently target something else."""
    require_release_supports("pinned_ops")
    import inspect

    from flashinfer.autotune_cache import ManagedAutotuneCache
    from flashinfer.autotuner import AutoTuner

    from fi_patches.internals import Internal
    from tests.drift.mutate import owner_of

    writers = {
        "save_configs": inspect.getattr_static(AutoTuner, "save_configs"),
        "publish": inspect.getattr_static(ManagedAutotuneCache, "publish"),
        "store": ManagedAutotuneCache,
    }
    broken: dict[str, set[str]] = {name: set() for name in writers}
    for case in all_cases():
        internal = case.internal
        if not isinstance(internal, Internal) or not internal.attr:
            continue
        try:
            owner, name = owner_of(internal)
        except Exception:
            continue
        target = inspect.getattr_static(owner, name, None)
        for writer, obj in writers.items():
            if target is obj:
                broken[writer].add(case.mutation)
    assert {"removed", "raising", "wrong_shape"} <= broken["save_configs"], broken
    assert {"raising", "wrong_shape"} <= broken["publish"], broken
    assert "removed" in broken["store"], broken


V1_DICT_ENTRIES = """
import json
from flashinfer.autotuner import AutoTuner

saved = AutoTuner.save_configs

def save_configs(self, path):  # a release writing each entry as a table
    saved(self, path)
    with open(path) as f:
        data = json.load(f)
    data = {
        k: {"runner": v[0], "tactic": v[1]} if not k.startswith("_") else v
        for k, v in data.items()
    }
    with open(path, "w") as f:
        json.dump(data, f)

AutoTuner.save_configs = save_configs
"""

V2_RENAMED_FIELD = """
import flashinfer.autotune_cache as store

written = store._atomic_write_json

def atomic_write_json(path, obj):  # a release calling the entry's tactic "choice"
    if isinstance(obj, dict) and "tactic" in obj:
        obj = {("choice" if k == "tactic" else k): v for k, v in obj.items()}
    written(path, obj)

store._atomic_write_json = atomic_write_json
"""

RUN = """
import sys
from fi_patches.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run(server: ForkServer, fault: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process (a fork of one that imported torch alone) after ``fault``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env.update(FI_PATCHES_CACHE_DIR="off", FI_PATCHES_DEVICE="sm_103")
    return server.run(["-c", textwrap.dedent(fault) + RUN, *args], env, os.getcwd(), timeout=600)


def _pinned_ops(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr[-2000:]
    return next(r for r in json.loads(result.stdout) if r["name"] == "pinned_ops")


@pytest.mark.parametrize(
    ("fault", "path", "form"),
    [
        (V1_DICT_ENTRIES, "flashinfer.autotuner.AutoTuner.save_configs", "v1 file"),
        (V2_RENAMED_FIELD, "flashinfer.autotune_cache.ManagedAutotuneCache.publish", "v2 store"),
    ],
    ids=["v1_entries_as_tables", "v2_tactic_renamed"],
)
def test_a_writer_that_changed_its_form_disables_pinned_ops(forkserver, fault, path, form):
    require_release_supports("pinned_ops")
    record = _pinned_ops(_run(forkserver, fault, "doctor", "--json"))
    assert not record["enabled"]
    assert f"{path} misbehaves: the {form} it wrote for ('fi_patches_probe'" in record["reason"]
    assert "reads back as [no entry]" in record["reason"]
    unpatched = _pinned_ops(_run(forkserver, "", "doctor", "--json"))
    assert unpatched["enabled"], unpatched["reason"]


def test_pins_record_of_a_file_in_a_changed_form_says_the_form_changed(tmp_path, forkserver):
    require_release_supports("pinned_ops")
    write = V1_DICT_ENTRIES + textwrap.dedent(
        f"""
        from fi_patches.internals import tuner as fi_tuner
        key, _ = fi_tuner.probe_key()
        tuner = AutoTuner()
        tuner.profiling_cache[key] = (3, None)
        tuner.save_configs({str(tmp_path / "cache.json")!r})
        """
    )
    result = _run(forkserver, write, "pins", "record", "--from", str(tmp_path / "cache.json"))
    assert result.returncode == 1
    assert f"pins record: {tmp_path / 'cache.json'} holds no tuned entry" in result.stderr
    assert (
        "and the installed FlashInfer's cache form changed: "
        "flashinfer.autotuner.AutoTuner.save_configs misbehaves"
    ) in result.stderr
