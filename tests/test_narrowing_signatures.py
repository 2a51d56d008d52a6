"""The one ``get_valid_tactics`` wrapper (``fi_patches.pinning.narrowing``) takes FlashInfer
0.7.x's ``(inputs, profile)`` by position or keyword, under the names the runner's own method
gives them, binds its arguments as that method does, and passes extra arguments on to a runner
that takes more; every form answers the same way."""

from __future__ import annotations

import inspect

import pytest

from fi_patches.pinning import stack
from fi_patches.pinning.narrowing import valid_tactics_replacement
from fi_patches.pins import PinTable
from tests import lowlat
from tests.mxfp8_inputs import Mxfp8Problem

N, K = lowlat.SHAPE


class Gate:
    active = True


def _table(pin):
    return PinTable.from_mapping(
        {
            "meta": {"device": "sm_103", "flashinfer": ">=0.7.0"},
            "low_latency": [
                {"n": N, "k": K, "min_rows": 5, "max_rows": 8, "tactic": list(pin)},
            ],
        }
    )


@pytest.fixture
def real_runner(pinning):
    return lowlat.runner()


def _stock_method(runner):
    return type(runner).get_valid_tactics


def test_the_wrapper_of_the_real_runner_takes_inputs_and_profile(real_runner):
    original = _stock_method(real_runner)
    wrapped = valid_tactics_replacement(lowlat.LL_CLASS)(original, Gate())
    assert list(inspect.signature(wrapped, follow_wrapped=False).parameters)[:3] == [
        "self",
        "inputs",
        "profile",
    ]
    pin = lowlat.non_split_alternative(N, K, 8)
    pinned, unpinned = Mxfp8Problem(N, K, 8).runner_inputs(), Mxfp8Problem(K, N, 8).runner_inputs()
    token = stack.push(_table(pin))
    try:
        assert [tuple(t) for t in wrapped(real_runner, pinned, None)] == [pin]
        assert wrapped(real_runner, unpinned, None) == original(real_runner, unpinned, None)
        assert wrapped(real_runner, inputs=pinned, profile=None) == [pin]
        four = Mxfp8Problem(N, K, 4).runner_inputs()
        assert [tuple(t) for t in wrapped(real_runner, four, None)] == (
            lowlat.stock(N, K, 4)
        )  # rows 4 are outside the pinned 5..8
    finally:
        stack.pop(token)


def _raised(function, *args, **kwargs):
    """The TypeError ``function(*args, **kwargs)`` raises, as (type, message after the name)."""
    try:
        function(*args, **kwargs)
    except TypeError as exc:
        return TypeError, str(exc).split("()", 1)[-1]
    return None


def test_the_wrapper_binds_arguments_as_the_runners_own_method_does(real_runner):
    """FlashInfer's ``(self, inputs, profile)`` has no default and takes nothing else: a call
    missing ``profile`` or passing more raises the TypeError the method itself raises, pinned
    or not."""
    original = _stock_method(real_runner)
    wrapped = valid_tactics_replacement(lowlat.LL_CLASS)(original, Gate())
    pinned = Mxfp8Problem(N, K, 8).runner_inputs()
    token = stack.push(_table(lowlat.non_split_alternative(N, K, 8)))
    try:
        for args, kwargs in [((pinned,), {}), ((pinned, None, 1), {}), ((pinned, None), {"x": 1})]:
            got = _raised(wrapped, real_runner, *args, **kwargs)
            assert got is not None and got == _raised(original, real_runner, *args, **kwargs), (
                args,
                kwargs,
                got,
            )
    finally:
        stack.pop(token)


def test_a_method_spelling_its_profile_differently_is_called_by_that_name(real_runner):
    """FlashInfer spells the parameter ``_profile`` in some runners: the wrapper takes it by
    that name (and refuses ``profile=`` as the method does), and narrows either way."""
    stock = _stock_method(real_runner)

    def original(self, inputs, _profile):
        return stock(self, inputs, _profile)

    wrapped = valid_tactics_replacement(lowlat.LL_CLASS)(original, Gate())
    assert list(inspect.signature(wrapped, follow_wrapped=False).parameters) == [
        "self",
        "inputs",
        "_profile",
    ]
    pin = lowlat.non_split_alternative(N, K, 8)
    pinned, unpinned = Mxfp8Problem(N, K, 8).runner_inputs(), Mxfp8Problem(K, N, 8).runner_inputs()
    token = stack.push(_table(pin))
    try:
        assert [tuple(t) for t in wrapped(real_runner, pinned, _profile=None)] == [pin]
        assert wrapped(real_runner, inputs=unpinned, _profile=None) == stock(
            real_runner, unpinned, None
        )
        refused = _raised(wrapped, real_runner, pinned, profile=None)
        assert refused is not None and refused == _raised(
            original, real_runner, pinned, profile=None
        )
    finally:
        stack.pop(token)


def test_a_runner_taking_more_arguments_gets_them_passed_on(real_runner):
    stock = _stock_method(real_runner)
    seen = []

    def original(self, inputs, profile, extra=None, **options):
        seen.append((extra, options))
        return stock(self, inputs, profile)

    wrapped = valid_tactics_replacement(lowlat.LL_CLASS)(original, Gate())
    assert "args" in inspect.signature(wrapped, follow_wrapped=False).parameters
    pin = lowlat.non_split_alternative(N, K, 8)
    pinned, unpinned = Mxfp8Problem(N, K, 8).runner_inputs(), Mxfp8Problem(K, N, 8).runner_inputs()
    token = stack.push(_table(pin))
    try:
        assert wrapped(real_runner, unpinned, None, 1, flag=True) == stock(
            real_runner, unpinned, None
        )
        assert seen[-1] == (1, {"flag": True})
        assert [tuple(t) for t in wrapped(real_runner, pinned, None, 2)] == [pin]
    finally:
        stack.pop(token)
    assert wrapped(real_runner, pinned, None, 3) == stock(real_runner, pinned, None)
    assert seen[-1] == (3, {})


def test_an_inactive_gate_answers_stock_even_for_a_pinned_weight(real_runner):
    original = _stock_method(real_runner)
    gate = Gate()
    gate.active = False
    wrapped = valid_tactics_replacement(lowlat.LL_CLASS)(original, gate)
    pinned = Mxfp8Problem(N, K, 8).runner_inputs()
    token = stack.push(_table(lowlat.non_split_alternative(N, K, 8)))
    try:
        assert wrapped(real_runner, pinned, None) == original(real_runner, pinned, None)
    finally:
        stack.pop(token)
