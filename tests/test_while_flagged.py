"""``WhileFlagged`` on plain classes of the test's own: the patch it keeps is applied exactly
while some instance's flag is set, the owner's own ``__setattr__`` is kept and put back, an
instance that takes no weak reference keeps the patch applied, and a patch that cannot apply
when the flag is set leaves the assignment standing and logs once. FlashInfer's tuner under it
is tested in ``tests/test_tuning_flag.py``."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from fi_patches.patching import AttributePatch, PatchError, PatchSet, WhileFlagged


def _greeting(original: Any, gate: Any) -> Any:
    def greet(self: Any) -> str:
        return "patched" if gate.active else original(self)

    greet.__wrapped__ = original  # type: ignore[attr-defined]
    return greet


def _owner() -> type:
    class Tuner:
        def __init__(self) -> None:
            self.tuning = False

        def greet(self) -> str:
            return "stock"

    return Tuner


def _switch(owner: type, instances: list[Any]) -> WhileFlagged:
    return WhileFlagged(
        owner, "tuning", AttributePatch(owner, "greet", _greeting), lambda: instances
    )


def test_the_patch_is_applied_exactly_while_some_instance_is_flagged():
    owner = _owner()
    first, second = owner(), owner()
    before = dict(vars(owner))
    switch = _switch(owner, [first, second])
    switch.apply()
    assert vars(owner)["greet"] is before["greet"]
    first.tuning = True
    assert first.greet() == "patched" and second.greet() == "patched"
    second.tuning = True
    first.tuning = False
    assert vars(owner)["greet"] is not before["greet"]  # the second still tunes
    second.tuning = False
    assert vars(owner)["greet"] is before["greet"]
    third = owner()  # created while applied: its __init__'s assignment goes through the hook
    third.tuning = 1
    assert third.greet() == "patched"
    switch.revert()
    assert third.tuning == 1  # assignments always stand
    after = dict(vars(owner))
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


def test_an_instance_flagged_before_apply_gets_the_patch_at_once():
    owner = _owner()
    instance = owner()
    instance.tuning = True
    switch = _switch(owner, [instance])
    switch.apply()
    assert instance.greet() == "patched"
    instance.tuning = False
    assert instance.greet() == "stock"
    switch.revert()


def test_the_owners_own_setattr_runs_first_and_is_put_back():
    owner = _owner()
    seen: list[str] = []

    def own(self: Any, name: str, value: Any) -> None:
        seen.append(name)
        object.__setattr__(self, name, value)

    owner.__setattr__ = own  # type: ignore[assignment, method-assign]
    instance = owner()
    switch = _switch(owner, [instance])
    switch.apply()
    assert vars(owner)["__setattr__"].__wrapped__ is own
    instance.tuning = True
    assert seen[-1] == "tuning" and instance.greet() == "patched"
    switch.revert()
    assert vars(owner)["__setattr__"] is own
    assert instance.greet() == "stock"


def test_an_instance_without_weak_references_keeps_the_patch_applied():
    class Slotted:
        __slots__ = ("tuning",)

        def greet(self) -> str:
            return "stock"

    instance = Slotted()
    switch = WhileFlagged(
        Slotted, "tuning", AttributePatch(Slotted, "greet", _greeting), lambda: [instance]
    )
    switch.apply()
    instance.tuning = True
    instance.tuning = False  # not tracked: the patch stays rather than vanish mid-tuning
    assert instance.greet() == "patched"
    switch.revert()
    assert instance.greet() == "stock" and "__setattr__" not in vars(Slotted)


def test_a_patch_that_cannot_apply_on_the_flag_logs_once_and_the_assignment_stands(caplog):
    owner = _owner()
    instance = owner()
    switch = _switch(owner, [instance])
    switch.apply()
    greet = vars(owner)["greet"]
    del owner.greet  # gone from the class by the time tuning starts
    with caplog.at_level(logging.ERROR, logger="fi_patches"):
        instance.tuning = True
        instance.tuning = False
        instance.tuning = True
    assert instance.tuning is True
    errors = [r for r in caplog.records if "could not follow" in r.getMessage()]
    assert len(errors) == 1 and "greet" in errors[0].getMessage()
    owner.greet = greet  # type: ignore[attr-defined]
    switch.revert()
    assert "__setattr__" not in vars(owner)


def test_apply_checks_the_patch_first_and_leaves_nothing_applied():
    owner = _owner()
    before = dict(vars(owner))
    missing = WhileFlagged(
        owner, "tuning", AttributePatch(owner, "absent", _greeting), lambda: [owner()]
    )
    with pytest.raises(PatchError, match="absent"):
        PatchSet([missing]).apply()
    after = dict(vars(owner))
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
