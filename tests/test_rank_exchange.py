"""The rank guard's parts in one process: the store exchange (ranks as threads over a real
torch.distributed HashStore or FileStore), the fingerprint, the mismatch report, the settings,
and the automatic guard's wrapper on FlashInfer's real ``set_autotune_process_group``. The
guard across real processes is in test_rank_guard.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fi_patches
from fi_patches._env import rank_guard_mode as automatic_mode
from fi_patches.ranks.exchange import ExchangeTimeout, GroupView, all_gather
from fi_patches.ranks.guard import (
    ABSENT,
    Fingerprint,
    differences,
    local_fingerprint,
    mismatch_message,
)
from tests.workers import workers


def hash_store(tmp_path: Path, world: int) -> list[Any]:
    import torch.distributed as dist

    store = dist.HashStore()
    return [store] * world


def file_store(tmp_path: Path, world: int) -> list[Any]:
    import torch.distributed as dist

    return [dist.FileStore(str(tmp_path / "store"), world) for _ in range(world)]


def exchange(
    stores: list[Any], payloads: list[bytes], timeout: float, delays: list[float], name: str
) -> dict[int, Any]:
    """Run ``all_gather`` for each rank on its own thread; each rank's result or exception."""
    found: dict[int, Any] = {}

    def rank(r: int) -> None:
        time.sleep(delays[r])
        view = GroupView(stores[r], r, len(stores), tuple(range(len(stores))), name)
        try:
            found[r] = all_gather(view, "test", payloads[r], timeout)
        except ExchangeTimeout as exc:
            found[r] = exc

    with workers(name="rank") as pool:  # any other exception, or a hang, fails the test
        for r in range(len(stores)):
            pool.start(rank, r)
    return found


@pytest.mark.parametrize("make", [hash_store, file_store])
def test_every_rank_gets_every_payload_and_the_keys_are_removed(
    make: Callable[[Path, int], list[Any]], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stores = make(tmp_path, 3)
    before = stores[0].num_keys()
    payloads = [f"rank {r}".encode() for r in range(3)]
    found = exchange(stores, payloads, 20, [0, 0.05, 0.1], request.node.name)
    assert found == {r: payloads for r in range(3)}
    assert stores[0].num_keys() == before  # the last reader deleted the round's keys
    again = exchange(stores, payloads[::-1], 20, [0, 0, 0], request.node.name)
    assert again == {r: payloads[::-1] for r in range(3)}  # a second round is its own


def test_a_rank_arriving_after_the_deadline_gets_the_same_verdict(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stores = hash_store(tmp_path, 3)
    found = exchange(stores, [b"a", b"b", b"c"], 0.3, [0, 0, 1.0], request.node.name)
    assert all(isinstance(f, ExchangeTimeout) for f in found.values()), found
    assert {f.missing for f in found.values()} == {(2,)}  # the late rank too


def test_a_single_rank_group_exchanges_without_the_store(request: pytest.FixtureRequest) -> None:
    view = GroupView(None, 0, 1, (0,), request.node.name)
    assert all_gather(view, "test", b"only", 1) == [b"only"]


def view(size: int, global_ranks: tuple[int, ...] | None = None) -> GroupView:
    return GroupView(None, 0, size, global_ranks or tuple(range(size)), "tp")


def test_the_mismatch_report_lists_who_holds_what_per_field() -> None:
    common = (("fi_patches", "0.1.0"), ("device", "sm_103"))
    prints = [Fingerprint(common) for _ in range(3)]
    prints.append(
        Fingerprint(
            (("fi_patches", "0.1.0"), ("device", "sm_100"), ("flashinfer", "0.7.4")),
            (("env.X", "1"),),
        )
    )
    found, information = differences(prints), differences(prints, info=True)
    assert found == {
        "device": {"sm_103": (0, 1, 2), "sm_100": (3,)},
        "flashinfer": {ABSENT: (0, 1, 2), "0.7.4": (3,)},
    }
    assert information == {"env.X": {ABSENT: (0, 1, 2), "1": (3,)}}
    text = mismatch_message(view(4, (4, 5, 6, 7)), found, information)
    lines = text.splitlines()
    assert "the 4 ranks of process group 'tp' disagree on 2 fields" in lines[0]
    assert lines[1] == (
        "  device: ranks 0 (global 4), 1 (global 5), 2 (global 6) have 'sm_103'; "
        "rank 3 (global 7) has 'sm_100'"
    )
    assert lines[2].startswith("  flashinfer: ranks 0 (global 4), 1 (global 5), 2 (global 6) have")
    assert lines[3].startswith("Also different, for information")
    assert lines[4].startswith("  env.X: ranks 0 (global 4), 1 (global 5), 2 (global 6) have")


def test_information_fields_travel_but_are_not_compared() -> None:
    one = Fingerprint((("device", "sm_103"),), (("env.FI_PATCHES_CACHE_DIR", "/node0"),))
    other = Fingerprint((("device", "sm_103"),), (("env.FI_PATCHES_CACHE_DIR", "/node1"),))
    assert Fingerprint.from_bytes(other.to_bytes()) == other
    assert differences([one, other]) == {} and one.digest == other.digest
    assert other["env.FI_PATCHES_CACHE_DIR"] == "/node1"


def test_an_invalid_default_table_is_a_fingerprint_value_not_a_crash(
    pinning: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "pins.toml"
    bad.write_text("[meta\n")
    monkeypatch.setenv("FI_PATCHES_PINS", str(bad))
    fields = local_fingerprint().as_dict()
    assert fields["pins.default.sha256"] == "invalid"
    assert str(bad) in fields["pins.default.source"]
    assert fields["env.FI_PATCHES_PINS"] == str(bad)
    assert fields["pins.active.sha256"] == "none"


def test_equal_tables_have_equal_digests_wherever_they_were_loaded_from(
    pinning: str, tmp_path: Path
) -> None:
    from tests import lowlat

    text = lowlat.entry(*lowlat.SHAPE, 5, 8, lowlat.non_split_alternative(*lowlat.SHAPE, 8))
    one, two = lowlat.table(text, source="one"), lowlat.table(text, source="two")
    with fi_patches.pinned_tactics(one):
        first = local_fingerprint().as_dict()
    with fi_patches.pinned_tactics(two):
        second = local_fingerprint().as_dict()
    assert first["pins.active.sha256"] == second["pins.active.sha256"] != "none"
    assert (first["pins.active.source"], second["pins.active.source"]) == ("one", "two")


def test_an_unknown_mode_warns_once_and_keeps_raise(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FI_PATCHES_RANK_GUARD", "loud")
    with caplog.at_level(logging.WARNING, logger="fi_patches"):
        assert automatic_mode() == "raise"
        assert automatic_mode() == "raise"
    assert [r.getMessage() for r in caplog.records].count(
        "FI_PATCHES_RANK_GUARD='loud' is not one of raise|disable|warn|off; using 'raise'"
    ) == 1
    monkeypatch.setenv("FI_PATCHES_RANK_GUARD", "Off")
    assert automatic_mode() == "off"


def test_rank_guard_refuses_bad_arguments_and_an_uninitialized_group() -> None:
    with pytest.raises(ValueError, match="on_mismatch='loud'"):
        fi_patches.rank_guard(on_mismatch="loud")
    with pytest.raises(ValueError, match="timeout=0"):
        fi_patches.rank_guard(timeout=0)
    with pytest.raises(ValueError, match="init_process_group"):
        fi_patches.rank_guard()


def test_the_automatic_guard_never_raises_for_fi_patches_own_trouble(
    pinning: str, caplog: pytest.LogCaptureFixture
) -> None:
    import flashinfer.autotuner as fa

    original = vars(fa)["set_autotune_process_group"]
    group = object()  # torch.distributed is not initialized: the guard cannot run
    with fi_patches.pinned_tactics() as active:  # nothing pinned, the guard armed all the same
        assert active is None
        assert vars(fa)["set_autotune_process_group"] is not original
        with caplog.at_level(logging.WARNING, logger="fi_patches"):
            fa.set_autotune_process_group(group)
        assert fa.get_autotune_process_group() is group  # FlashInfer's own setter ran
        fa.set_autotune_process_group(None)
    assert "automatic rank guard could not run" in caplog.text
    assert vars(fa)["set_autotune_process_group"] is original
    assert vars(fa.autotuner)["set_autotune_process_group"] is original


def test_mode_off_leaves_the_setter_alone(
    pinning: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import flashinfer.autotuner as fa

    monkeypatch.setenv("FI_PATCHES_RANK_GUARD", "off")
    group = object()
    with fi_patches.pinned_tactics(), caplog.at_level(logging.DEBUG, logger="fi_patches"):
        fa.set_autotune_process_group(group)
        assert fa.get_autotune_process_group() is group
        fa.set_autotune_process_group(None)
    assert "rank guard" not in caplog.text
