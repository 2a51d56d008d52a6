"""The rank guard across 4 real processes joined by torch.distributed on gloo (CPU), with
FlashInfer's real tuner under tests/simulation.py and ``FI_PATCHES_DEVICE=sm_103``.

One process group runs every scenario in turn (starting 4 interpreters with FlashInfer costs
most of the time), each rank reporting what each scenario did; the tests below read those
reports. ``run_group`` kills every rank and fails if the group outlives its wall-clock limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import lowlat
from tests.conftest import require_release_supports
from tests.process_group import run_group

N, K = lowlat.SHAPE
WORLD = 4
LIMIT = 300.0  # seconds for the whole group; the scenarios take well under a minute

BODY = """
import importlib, shutil, time, traceback
from contextlib import nullcontext
import pytest, torch
from tests import simulation
simulation.install(pytest.MonkeyPatch())  # SIMULATION: device-only helpers, so tuning runs on CPU
import flashinfer
import fi_patches, fi_patches.auto
from fi_patches import RankMismatchError, rank_guard
from fi_patches.pinning import stack
from fi_patches.pinning.installation import installed_count
from fi_patches.ranks import GUARD
from fi_patches.ranks.guard import TacticDivergenceError
from flashinfer.autotuner import AutoTuner, get_autotune_process_group
from tests import lowlat
from tests.mxfp8_inputs import Mxfp8Problem

OTHER, N, K = {other!r}, {n}, {k}
results = {{}}


def outcome(call):
    start = time.monotonic()
    try:
        value = call()
    except RankMismatchError as exc:
        return {{
            "raised": type(exc).__name__, "message": str(exc), "fields": sorted(exc.differences),
            "missing": list(exc.missing), "information": sorted(getattr(exc, "information", {{}})), "lists": {{str(r): l for r, l in getattr(exc, "lists", {{}}).items()}},
            "seconds": time.monotonic() - start,
        }}
    except Exception as exc:
        return {{"error": f"{{type(exc).__name__}}: {{exc}}", "trace": traceback.format_exc()[-3000:]}}
    return {{"passed": True, "value": value, "seconds": time.monotonic() - start}}


def odd(rank):
    return fi_patches.pinned_tactics(OTHER) if RANK == rank else nullcontext()


def guard():
    return rank_guard(timeout=20).as_dict()


results["agree"] = outcome(guard)


def other_table():
    with odd(3):
        return guard()


results["table"] = outcome(other_table)


def other_device():
    if RANK == 2:
        os.environ["FI_PATCHES_DEVICE"] = "sm_100"
        fi_patches.refresh()
    try:
        return guard()
    finally:
        if RANK == 2:
            os.environ["FI_PATCHES_DEVICE"] = "sm_103"
            fi_patches.refresh()


results["device"] = outcome(other_device)


def feature_off():
    # Fault injection into this rank's FlashInfer: the low-latency enumerator is gone, so the
    # compat layer disables pinned_tactics here (a self-disabled feature on one node).
    module = importlib.import_module("flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm")
    saved = module.autotune_tactics
    if RANK == 1:
        del module.autotune_tactics
        fi_patches.refresh()
    try:
        return guard()
    finally:
        if RANK == 1:
            module.autotune_tactics = saved
            fi_patches.refresh()


results["feature_off"] = outcome(feature_off)


def auto_off():
    if RANK == 0:
        fi_patches.disable()
    try:
        return guard()
    finally:
        if RANK == 0:
            fi_patches.enable()


results["auto_off"] = outcome(auto_off)
results["auto_back"] = outcome(guard)


def moved(odd_rank):
    # Each rank reads its tables from a path of its own and keeps its self-check outcomes in a
    # per-node FI_PATCHES_CACHE_DIR; the odd rank's block holds other content (table A's).
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"moved{{RANK}}")
    os.makedirs(folder, exist_ok=True)
    default = os.environ["FI_PATCHES_PINS"]
    copy = shutil.copy(default, os.path.join(folder, "pins.toml"))
    block = shutil.copy(default if RANK == odd_rank else OTHER, os.path.join(folder, "block.toml"))
    os.environ.update(FI_PATCHES_PINS=copy, FI_PATCHES_CACHE_DIR=os.path.join(folder, "cache"))
    fi_patches.refresh()
    try:
        with fi_patches.pinned_tactics(block):
            return guard()
    finally:
        os.environ["FI_PATCHES_PINS"] = default
        del os.environ["FI_PATCHES_CACHE_DIR"]
        fi_patches.refresh()


results["moved"] = outcome(lambda: moved(None))
results["moved_other_content"] = outcome(lambda: moved(3))


def automatic(odd_rank):
    # Imported at the call, as servers do: the guard wraps the module attribute while
    # fi_patches is active, so a name bound before fi_patches.disable()/enable() is not it.
    from flashinfer.autotuner import set_autotune_process_group

    with odd(odd_rank):
        try:
            set_autotune_process_group(dist.group.WORLD)
        except RankMismatchError:
            results["setter_left_group_unset"] = get_autotune_process_group() is None
            raise
        was_set = get_autotune_process_group() is dist.group.WORLD
        set_autotune_process_group(None)
        return was_set


results["automatic_agree"] = outcome(lambda: automatic(None))
results["automatic"] = outcome(lambda: automatic(3))


def tune(odd_rank):
    from flashinfer.autotuner import set_autotune_process_group

    os.environ["FI_PATCHES_RANK_GUARD"] = "off"  # the detector alone, not the guard before it
    AutoTuner.get().clear_cache()
    try:
        with odd(odd_rank):
            set_autotune_process_group(dist.group.WORLD)
            try:
                with flashinfer.autotune(True):
                    try:
                        flashinfer.mm_mxfp8(
                            *Mxfp8Problem(N, K, 8).mm_args(), out_dtype=torch.bfloat16,
                            backend="cutedsl_low_latency",
                        )
                    except TacticDivergenceError:
                        raise
                    except Exception as exc:
                        if "CUDA" not in str(exc):
                            raise
                        # the kernel launch, on CPU: tuning is over by then
            finally:
                set_autotune_process_group(None)
    finally:
        del os.environ["FI_PATCHES_RANK_GUARD"]
    return sorted(lowlat.cached_low_latency(AutoTuner.get(), N, K))


results["tuning_agree"] = outcome(lambda: tune(None))
results["tuning"] = outcome(lambda: tune(3))


def disable_mode():
    with odd(3):
        rank_guard(on_mismatch="disable", timeout=20)
        runner = lowlat.runner()
        lists = {{
            rows: [list(t) for t in runner.get_valid_tactics(Mxfp8Problem(N, K, rows).runner_inputs(), None)]
            for rows in (1, 2, 4, 8)
        }}
        stock = {{rows: [list(t) for t in lowlat.stock(N, K, rows)] for rows in lists}}
        with fi_patches.pinned_tactics(OTHER) as later:
            later_pins = later is not None
        return {{
            "lists": lists, "stock": lists == stock, "suspended": stack.suspended() is not None,
            "installed": installed_count() + GUARD.count, "active": len(stack.opened_tables()),
            "later_block_pins": later_pins,
        }}


results["disable"] = outcome(disable_mode)

# Rank 2 never calls the guard: the others fail after the timeout, naming it.
results["missing"] = outcome(lambda: rank_guard(timeout=3).as_dict()) if RANK != 2 else None
report(results)
"""


def _table(path: Path, tactic: tuple[int, ...]) -> Path:
    path.write_text(
        '[meta]\ndevice = "sm_103"\nflashinfer = ">=0.7.0"\n\n'
        f"[[low_latency]]\nn = {N}\nk = {K}\nmin_rows = 5\nmax_rows = 8\ntactic = {list(tactic)}\n"
    )
    return path


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Each rank's report of every scenario. Every rank has ``FI_PATCHES_PINS`` = table A and
    ``fi_patches.auto`` on; scenarios make one rank differ."""
    require_release_supports("pinned_tactics")
    tmp = tmp_path_factory.mktemp("ranks")
    table_a = _table(tmp / "a.toml", lowlat.non_split_alternative(N, K, 8))
    table_b = _table(tmp / "b.toml", lowlat.non_split_alternative(N, K, 8, skip=2))
    outcomes = run_group(
        BODY.format(other=str(table_b), n=N, k=K),
        WORLD,
        tmp,
        limit=LIMIT,
        env=lambda rank: {"FI_PATCHES_PINS": str(table_a), "FI_PATCHES_RANK_GUARD_TUNING": "1"},
    )
    for o in outcomes:
        assert o.returncode == 0, f"rank {o.rank} exited {o.returncode}:\n{o.stderr[-3000:]}"
    return [o.result for o in outcomes]


def scenario(ranks: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    found = [r[name] for r in ranks]
    errors = [f for f in found if f and "error" in f]
    assert not errors, errors[0]["trace"]
    return found


@pytest.mark.simulated
def test_the_same_table_everywhere_passes_with_one_fingerprint(ranks):
    agree = scenario(ranks, "agree")
    assert all(a["passed"] for a in agree)
    fingerprint = agree[0]["value"]
    assert all(a["value"] == fingerprint for a in agree)
    assert fingerprint["device"] == "sm_103" and fingerprint["flashinfer"]
    assert fingerprint["feature.pinned_tactics"] == "enabled" and fingerprint["auto"] == "on"
    assert fingerprint["pins.active.source"].endswith("a.toml")
    assert len(fingerprint["pins.active.sha256"]) == 64
    assert fingerprint["env.FI_PATCHES_PINS"].endswith("a.toml")
    assert all(a["passed"] for a in scenario(ranks, "auto_back"))  # enable() after disable()


@pytest.mark.simulated
@pytest.mark.parametrize(
    ("name", "rank", "field"),
    [
        ("table", 3, "pins.active.sha256"),
        ("device", 2, "device"),
        ("feature_off", 1, "feature.pinned_tactics"),
        ("auto_off", 0, "auto"),
    ],
)
def test_one_differing_rank_raises_on_every_rank_naming_it(ranks, name, rank, field):
    found = scenario(ranks, name)
    assert all(f.get("raised") == "RankMismatchError" for f in found), found
    assert len({f["message"] for f in found}) == 1  # the same report on every rank
    assert all(f["seconds"] < 30 for f in found)
    assert field in found[0]["fields"]
    line = next(ln for ln in found[0]["message"].splitlines() if ln.strip().startswith(field + ":"))
    others = ", ".join(str(r) for r in range(WORLD) if r != rank)
    assert f"ranks {others} have" in line and f"rank {rank} has" in line


@pytest.mark.simulated
def test_table_paths_and_cache_dirs_per_rank_are_information_not_a_mismatch(ranks):
    moved = scenario(ranks, "moved")
    assert all(m.get("passed") for m in moved), moved
    prints = [m["value"] for m in moved]
    assert len({p["pins.active.sha256"] for p in prints}) == 1  # one content on every rank
    for field in ("pins.active.source", "pins.default.source", "env.FI_PATCHES_CACHE_DIR"):
        assert len({p[field] for p in prints}) == WORLD, field  # a path of each rank's own
    other = scenario(ranks, "moved_other_content")
    assert all(f.get("raised") == "RankMismatchError" for f in other), other
    assert other[0]["fields"] == ["pins.active.sha256"]
    assert "env.FI_PATCHES_CACHE_DIR" in other[0]["information"]
    line = next(ln for ln in other[0]["message"].splitlines() if "pins.active.sha256:" in ln)
    assert "ranks 0, 1, 2 have" in line and "rank 3 has" in line
    assert "for information" in other[0]["message"]


@pytest.mark.simulated
def test_disable_mode_turns_pins_off_on_every_rank_with_identical_lists(ranks):
    found = [f["value"] for f in scenario(ranks, "disable")]
    assert all(f["suspended"] and f["installed"] == 0 and f["active"] == 0 for f in found)
    assert all(f["stock"] for f in found)  # FlashInfer's own lists, pins off
    assert all(f["lists"] == found[0]["lists"] for f in found)
    assert not any(f["later_block_pins"] for f in found)


@pytest.mark.simulated
def test_flashinfers_set_autotune_process_group_runs_the_guard(ranks):
    assert all(f["passed"] and f["value"] for f in scenario(ranks, "automatic_agree"))
    found = scenario(ranks, "automatic")
    assert all(f.get("raised") == "RankMismatchError" for f in found), found
    assert all("pins.active.sha256" in f["fields"] for f in found)
    assert all("rank 3 has" in f["message"] for f in found)
    assert all(r["setter_left_group_unset"] for r in ranks)  # FlashInfer never got the group


@pytest.mark.simulated
def test_the_tuning_detector_names_the_rank_whose_candidates_differ(ranks):
    from fi_patches.internals import tuner as fi_tuner

    missing = fi_tuner.first_failure(fi_tuner.DETECTOR_PROBES)
    if missing is not None:
        pytest.skip(f"the tuning divergence detector is off on this FlashInfer: {missing}")
    assert all(f["passed"] and f["value"] == [1, 2, 4, 8] for f in scenario(ranks, "tuning_agree"))
    found = scenario(ranks, "tuning")
    assert all(f.get("raised") == "TacticDivergenceError" for f in found), found
    message = found[0]["message"]
    assert all(f["message"] == message for f in found)
    assert (
        "op 'mxfp8_gemm', runner CutedslLowLatencyBlockscaledGemmRunner, bucket ((8, 1536)"
        in message
    )
    pin_a = list(lowlat.non_split_alternative(N, K, 8))
    pin_b = list(lowlat.non_split_alternative(N, K, 8, skip=2))
    assert found[0]["lists"] == {"0": [pin_a], "1": [pin_a], "2": [pin_a], "3": [pin_b]}
    assert "ranks 0, 1, 2: 1 tactic" in message and "rank 3: 1 tactic" in message


@pytest.mark.simulated
def test_a_rank_that_never_calls_the_guard_is_named_after_the_timeout(ranks):
    found = scenario(ranks, "missing")
    assert found[2] is None
    for f in found[:2] + found[3:]:
        assert f.get("raised") == "RankMismatchError" and f["missing"] == [2]
        assert "rank 2 of the 4 ranks" in f["message"] and "within 3 s" in f["message"]
        assert 3 <= f["seconds"] < 30
