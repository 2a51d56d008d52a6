"""The vLLM integration's parts that need no vLLM: its environment variables, its features'
verdict where vLLM is absent, and the plugin's answer to bad settings (it never raises)."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from fi_patches._env import Settings
from fi_patches._env import vllm_settings as read


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {},
            Settings(
                False,
                False,
                "none of FI_PATCHES_PINS, FI_PATCHES_VLLM=1 or FI_PATCHES_VLLM_ROUTE=1 is set",
            ),
        ),
        ({"FI_PATCHES_PINS": "p.toml"}, Settings(True, False, "FI_PATCHES_PINS is set")),
        (
            {"FI_PATCHES_PINS": ""},
            Settings(
                False,
                False,
                "none of FI_PATCHES_PINS, FI_PATCHES_VLLM=1 or FI_PATCHES_VLLM_ROUTE=1 is set",
            ),
        ),
        ({"FI_PATCHES_VLLM": "1"}, Settings(True, False, "FI_PATCHES_VLLM=1")),
        (
            {"FI_PATCHES_VLLM": "on", "FI_PATCHES_VLLM_ROUTE": "1"},
            Settings(True, True, "FI_PATCHES_VLLM=on"),
        ),
        ({"FI_PATCHES_VLLM_ROUTE": "true"}, Settings(True, True, "FI_PATCHES_VLLM_ROUTE=true")),
        (
            {"FI_PATCHES_PINS": "p.toml", "FI_PATCHES_VLLM_ROUTE": "0"},
            Settings(True, False, "FI_PATCHES_PINS is set"),
        ),
        (
            {"FI_PATCHES_VLLM": "0", "FI_PATCHES_PINS": "p.toml", "FI_PATCHES_VLLM_ROUTE": "1"},
            Settings(False, False, "FI_PATCHES_VLLM=0 turns it off"),
        ),
    ],
)
def test_settings(env, expected):
    assert read(env) == expected


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"FI_PATCHES_VLLM": "sometimes", "FI_PATCHES_PINS": "p.toml"},
            Settings(True, False, "FI_PATCHES_PINS is set"),
        ),
        (
            {"FI_PATCHES_VLLM": "1", "FI_PATCHES_VLLM_ROUTE": "perhaps"},
            Settings(True, False, "FI_PATCHES_VLLM=1"),
        ),
    ],
)
def test_a_switch_that_is_not_a_boolean_counts_as_unset_with_one_warning(env, expected, caplog):
    with caplog.at_level(logging.WARNING, logger="fi_patches.env"):
        assert read(env) == expected
        assert read(env) == expected
    name, value = next((n, v) for n, v in env.items() if v not in ("1", "p.toml"))
    assert [r.getMessage() for r in caplog.records] == [
        f"{name}={value!r} is not a boolean (1/true/yes/on for on, 0/false/no/off or empty for "
        "off); using the default (unset)"
    ]


def test_the_plugin_answers_bad_settings_with_one_error_line_and_no_change(
    monkeypatch, caplog, tmp_path
):
    from fi_patches import activation
    from fi_patches.pinning.installation import installed_count
    from fi_patches.vllm import plugin

    before = activation.outcome()
    monkeypatch.setenv("FI_PATCHES_VLLM", "maybe")
    assert plugin._activate() == (
        logging.DEBUG,
        "off (none of FI_PATCHES_PINS, FI_PATCHES_VLLM=1 or FI_PATCHES_VLLM_ROUTE=1 is set)",
    )
    monkeypatch.setenv("FI_PATCHES_VLLM", "1")
    monkeypatch.setenv("FI_PATCHES_PINS", str(tmp_path / "missing.toml"))
    level, text = plugin._activate()
    if importlib.util.find_spec("vllm") is None:
        assert (level, text) == (
            logging.WARNING,
            "left vLLM and FlashInfer stock: vLLM (vllm) is not installed.",
        )
    else:
        assert level == logging.ERROR
        assert text.startswith("left vLLM and FlashInfer stock because of its pins: ")
        assert str(tmp_path / "missing.toml") in text
    assert activation.outcome() == before and installed_count() == 0


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_its_features_are_disabled_with_that_reason():
    import fi_patches

    records = {r.name: r for r in fi_patches.status()}
    for name in ("vllm_plugin", "vllm_route"):
        assert not records[name].enabled
        assert records[name].reason == "vLLM (vllm) is not installed."
    assert records["vllm_plugin"].device == "any"
    assert records["vllm_plugin"].flashinfer == "-"
    assert records["vllm_route"].verified.endswith("; vllm==0.34.0")
