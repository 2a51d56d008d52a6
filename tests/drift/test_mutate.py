"""The drift mutators on a small importable package shaped like FlashInfer's internals (a
module function, an ``lru_cache`` factory that defines its runner class, a class with a method,
classmethod and staticmethod, a singleton with instance attributes): each mutation breaks what
it says, keeps the descriptor kind, and the boundary's own probe sees the break."""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from fi_patches.internals import Internal, OneOf
from tests.drift import mutate

pytestmark = pytest.mark.release_independent  # no FlashInfer: runs once, in the main run

SOURCE = """
import functools
import threading

def tactics(problem, dtype, extra=None, *, flag=False):
    return [("tactics", problem, dtype, extra, flag)]


@functools.lru_cache(maxsize=None)
def runner_factory(sm_version, enable_pdl):
    class Runner:
        def get_valid_tactics(self, inputs, profile):
            return [sm_version]

    return Runner()


class Kernel:
    def __init__(self, acc_dtype, tiler):
        self.acc_dtype, self.tiler = acc_dtype, tiler

    def kernel(self, a, b):
        return ("kernel", a, b)

    @classmethod
    def is_valid(cls, m, n):
        return m > n

    @staticmethod
    def can_implement(m):
        return m % 2 == 0


class Tuner:
    _instance = None

    @classmethod
    def get(cls):
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def __init__(self):
        self._lock = threading.RLock()
        self.cache = {}


LIMIT = 64
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The package ``drift_fake`` with its module ``drift_fake.core``, imported fresh."""
    package = tmp_path / "drift_fake"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "core.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module("drift_fake.core")
    finally:
        for name in ("drift_fake.core", "drift_fake"):
            sys.modules.pop(name, None)


def internal(attr: str, kind: str, **fields: object) -> Internal:
    return Internal(attr or "module", kind, "drift_fake.core", attr, ("feature",), **fields)  # type: ignore[arg-type]


TACTICS = internal("tactics", "callable", params=("problem", "dtype"))
FACTORY = internal(
    "runner_factory",
    "factory",
    params=("sm_version", "enable_pdl"),
    builds="Runner",
    methods=("get_valid_tactics",),
)
INIT = internal("Kernel.__init__", "method", params=("acc_dtype", "tiler"))
METHOD = internal("Kernel.kernel", "method", params=("a", "b"))
CLASSMETHOD = internal("Kernel.is_valid", "method", params=("m", "n"))
STATICMETHOD = internal("Kernel.can_implement", "method", params=("m",))
LOCK = internal("Tuner.get()._lock", "attribute")
LIMIT = internal("LIMIT", "attribute")


def test_removed_and_renamed_take_the_attribute_away(fake: ModuleType) -> None:
    original = fake.tactics
    assert mutate.apply(TACTICS, "removed") == "deleted drift_fake.core.tactics"
    assert not hasattr(fake, "tactics") and not mutate.present(TACTICS)
    assert TACTICS.probe() is not None
    assert mutate.took_effect(TACTICS, "removed", original) is None
    mutate.apply(CLASSMETHOD, "renamed")
    assert "is_valid" not in vars(fake.Kernel)
    assert isinstance(vars(fake.Kernel)["is_valid" + mutate.SUFFIX], classmethod)
    assert "is_valid" in CLASSMETHOD.probe()  # type: ignore[operator]


def test_removing_a_dunder_method_leaves_only_objects(fake: ModuleType) -> None:
    mutate.apply(INIT, "removed")
    assert fake.Kernel.__init__ is object.__init__
    assert mutate.took_effect(INIT, "removed", None) is None
    assert "changed signature" in INIT.probe()  # type: ignore[operator]


def test_removing_a_module_makes_importing_it_fail(fake: ModuleType) -> None:
    module = Internal("core", "module", "drift_fake.core", "", ("feature",))
    mutate.apply(module, "removed")
    assert not hasattr(sys.modules["drift_fake"], "core")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("drift_fake.core")
    assert module.probe() is not None


@pytest.mark.parametrize("target", [TACTICS, METHOD, CLASSMETHOD, STATICMETHOD, INIT])
def test_signature_renames_parameters_and_forwards_positionally(
    fake: ModuleType, target: Internal
) -> None:
    owner, name = mutate.owner_of(target)
    raw = inspect.getattr_static(owner, name)
    before = list(inspect.signature(getattr(owner, name)).parameters)
    mutate.apply(target, "signature")
    after = inspect.getattr_static(owner, name)
    assert type(after) is type(raw)  # a classmethod stays a classmethod, and so on
    names = [n for n in inspect.signature(getattr(owner, name)).parameters if n != "self"]
    assert names == [n if n == "self" else n + mutate.SUFFIX for n in before if n != "self"]
    assert "changed signature" in target.probe()  # type: ignore[operator]


def test_a_renamed_signature_still_works_positionally_but_not_by_old_keyword(
    fake: ModuleType,
) -> None:
    mutate.apply(TACTICS, "signature")
    assert fake.tactics(1, 2, 3, flag_drift=True) == [("tactics", 1, 2, 3, True)]
    with pytest.raises(TypeError):
        fake.tactics(problem=1, dtype=2)
    mutate.apply(METHOD, "signature")
    assert fake.Kernel(1, 2).kernel(3, 4) == ("kernel", 3, 4)
    mutate.apply(CLASSMETHOD, "signature")
    assert fake.Kernel.is_valid(3, 2) is True


def test_rebound_keeps_the_signature_but_hides_the_class_it_builds(fake: ModuleType) -> None:
    before = inspect.signature(fake.runner_factory)
    assert FACTORY.probe() is None
    mutate.apply(FACTORY, "rebound")
    assert inspect.signature(fake.runner_factory) == before
    assert not hasattr(fake.runner_factory, "__wrapped__")
    assert fake.runner_factory(100, True).get_valid_tactics(None, None) == [100]
    assert "no longer defines class Runner" in FACTORY.probe()  # type: ignore[operator]


@pytest.mark.parametrize("mutation", ["raising", "wrong_shape"])
@pytest.mark.parametrize("target", [TACTICS, FACTORY, METHOD, CLASSMETHOD, STATICMETHOD])
def test_raising_and_wrong_shape_change_behaviour_only(
    fake: ModuleType, target: Internal, mutation: str
) -> None:
    owner, name = mutate.owner_of(target)
    kind = type(inspect.getattr_static(owner, name))
    original = getattr(owner, name)
    mutate.apply(target, mutation)
    now = getattr(owner, name)
    if isinstance(owner, type):
        assert type(inspect.getattr_static(owner, name)) is kind
    assert inspect.signature(now) == inspect.signature(original)
    assert mutate.took_effect(target, mutation, original) is None
    args = (4,) * len(target.params)
    if mutation == "raising":
        with pytest.raises(RuntimeError, match=mutate.DRIFT_MESSAGE):
            now(*args)
    else:
        assert type(now(*args)) is object
    assert target.probe() is None  # the structure is unchanged: only a check that calls it can tell


def test_instance_attributes_are_broken_on_the_singleton(fake: ModuleType) -> None:
    tuner = fake.Tuner.get()
    lock = tuner._lock
    assert isinstance(lock, type(threading.RLock()))
    mutate.apply(LOCK, "wrong_shape")
    assert type(tuner._lock) is object
    tuner._lock = lock
    mutate.apply(LOCK, "renamed")
    assert not hasattr(tuner, "_lock") and getattr(tuner, "_lock" + mutate.SUFFIX) is lock
    assert LOCK.probe() is not None
    mutate.apply(LIMIT, "wrong_shape")
    assert type(fake.LIMIT) is object


def test_an_absent_internal_is_not_applicable_and_nothing_changes(fake: ModuleType) -> None:
    absent = internal("Kernel.gone", "method")
    before = dict(vars(fake.Kernel))
    with pytest.raises(mutate.NotApplicable):
        mutate.apply(absent, "removed")
    assert dict(vars(fake.Kernel)) == before


def test_a_one_of_is_removed_in_every_option_that_is_there(fake: ModuleType) -> None:
    either = OneOf("either", (internal("Kernel.gone", "method"), TACTICS, METHOD), ("feature",))
    mutate.apply(either, "removed")
    assert not hasattr(fake, "tactics") and not hasattr(fake.Kernel, "kernel")
    assert either.probe() is not None
    with pytest.raises(mutate.NotApplicable):
        mutate.apply(either, "removed")


@pytest.mark.parametrize("host", ["vllm", "sglang"])
def test_an_internal_of_a_package_not_installed_says_the_package_is_not_installed(
    host: str,
) -> None:
    """The drift suite's skip reads "vLLM is not installed here", not only that a path of it is
    not there, which reads as a vLLM release that moved it."""
    import importlib.util

    from fi_patches.internals import declared

    if importlib.util.find_spec(host) is not None:
        pytest.skip(f"{host} is installed here")
    label = {"vllm": "vLLM", "sglang": "SGLang"}[host]
    theirs = [d for d in declared() if d.path.startswith(f"{host}.")]
    assert theirs
    for declaration in theirs:
        with pytest.raises(mutate.NotApplicable) as caught:
            mutate.apply(declaration, "removed")
        assert (
            str(caught.value)
            == f"{label} is not installed here, so {declaration.path} is not there"
        )
