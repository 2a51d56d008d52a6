"""Reversible patches of FlashInfer objects: applied all together or not at all, and reverted
to the exact original objects. One attribute is replaced by a wrapper with the exact original
put back, and a group of patches is applied fully or not at all.

Every wrapper is transparent the standard way: its ``__wrapped__`` is the object it replaced, so
``inspect.unwrap`` reaches FlashInfer's own function. A wrapper off the hot path is a
``wrapt.FunctionWrapper`` (:func:`proxied`; wrapt is imported when the first such patch is
applied, never at ``import fi_patches``); a hot-path wrapper is a plain function with
``__wrapped__`` set (``functools.wraps``), which measures faster than wrapt's proxy.

:class:`RunnerMethodPatch` wraps a method on FlashInfer runner classes by name, those that exist
now and those created later, and on any runner class handed over while the patch is applied.
:class:`WhileFlagged` keeps a patch applied only while an instance attribute of its owner is set
(the tuner's tuning flag), so a wrapper needed only then is off every other call's path.

FlashInfer builds its CuTe DSL runner classes inside factory functions (one class per call
before 0.7.4, one per ``lru_cache`` key from 0.7.4), so there is no module attribute to patch
where the tuner looks the method up. The classes are found among the runner base class's
subclasses, and new ones through a temporary ``__init_subclass__`` on that base.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from fi_patches._logging import get_logger, log_once

logger = get_logger(__name__)


class Patch(Protocol):
    """One reversible change; ``revert`` restores the exact objects ``apply`` replaced."""

    def describe(self) -> str: ...

    def apply(self) -> None: ...

    def revert(self) -> None: ...


class PatchError(RuntimeError):
    """A patch could not be applied; nothing of its set stays applied."""


class PatchSet:
    """Applies ``patches`` in order; on any failure reverts those already applied."""

    def __init__(self, patches: Sequence[Patch]) -> None:
        self.patches = tuple(patches)
        self.applied = False

    def apply(self) -> None:
        if self.applied:
            return
        done: list[Patch] = []
        for patch in self.patches:
            try:
                patch.apply()
            except Exception as exc:
                for undo in reversed(done):
                    try:
                        undo.revert()
                    except Exception:
                        logger.exception(
                            "could not revert %s after a failed apply", undo.describe()
                        )
                raise PatchError(
                    f"cannot patch {patch.describe()}: {type(exc).__name__}: {exc}"
                ) from exc
            done.append(patch)
        self.applied = True

    def revert(self) -> None:
        if not self.applied:
            return
        for patch in reversed(self.patches):
            try:
                patch.revert()
            except Exception:
                logger.exception("could not revert %s", patch.describe())
        self.applied = False


class Gate(Protocol):
    """What a replacement consults on every call: False once its patch is reverted."""

    active: bool


Replacement = Callable[[Any, Gate], Callable[..., Any]]
"""Builds the replacement from the original function and its patch's gate. On a hot path it
is a plain function (one Python frame, no per-access binding object) with ``__wrapped__`` set
to the original (``functools.wraps``) that calls the original unchanged when ``gate.active`` is
False: if something else wrapped the attribute after us and revert had to leave it in place,
our layer is then a pass-through. Off the hot path, :func:`proxied` builds it."""

ProxyWrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]
"""wrapt's wrapper form: ``wrapper(wrapped, instance, args, kwargs)``."""


def proxied(wrapper: ProxyWrapper) -> Replacement:
    """The replacement that installs ``wrapt.FunctionWrapper(original, wrapper)``, enabled while
    its patch is applied (a pass-through once reverted, when something else wrapped the
    attribute after us). Its ``__wrapped__`` is the original; wrapt is imported here, when the
    patch is applied."""

    def make(original: Any, gate: Gate) -> Any:
        import wrapt

        return wrapt.FunctionWrapper(original, wrapper, enabled=lambda: gate.active)

    return make


def unwrap_own(found: Any, ours: Callable[[Any], bool]) -> Any:
    """What ``found`` wraps past the first wrapper of fi_patches' on its ``__wrapped__`` chain
    (``ours(f)`` tells), or ``found`` itself when the chain holds none: a wrapper someone else
    put over ours is seen through, FlashInfer's own decorators are not."""
    import inspect

    if ours(found):
        return found.__wrapped__
    try:
        mine = inspect.unwrap(found, stop=ours)
    except ValueError:  # a __wrapped__ cycle: nothing of ours is reachable
        return found
    return mine.__wrapped__ if mine is not found and ours(mine) else found


class AttributePatch:
    """Replaces ``owner.name`` (a module or class attribute) with ``make(original, self)``.

    The original is read from ``owner.__dict__`` so a class's plain function, not a bound
    method, is kept and put back. If something else replaced the attribute after us, revert
    leaves that object in place and our layer turns into a pass-through.
    """

    def __init__(self, owner: Any, name: str, make: Replacement) -> None:
        self.owner = owner
        self.name = name
        self.make = make
        self.active = False
        self._original: Any = None
        self._installed: Any = None

    def describe(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", "?")
        module = getattr(self.owner, "__module__", None)
        prefix = f"{module}." if module and module != owner else ""
        return f"{prefix}{owner}.{self.name}"

    def check(self) -> None:
        """Raise what :meth:`apply` would for an attribute the owner does not define itself."""
        if self.name not in vars(self.owner):
            raise AttributeError(f"{self.describe()} is not defined on {self.owner!r} itself")

    def apply(self) -> None:
        if self.active:
            return
        self.check()
        self._original = vars(self.owner)[self.name]
        self._installed = self.make(self._original, self)
        setattr(self.owner, self.name, self._installed)
        self.active = True

    def revert(self) -> None:
        if not self.active:
            return
        self.active = False
        current = vars(self.owner).get(self.name)
        if current is self._installed:
            setattr(self.owner, self.name, self._original)
        else:
            logger.warning(
                "%s was replaced by another patch after fi_patches wrapped it; leaving it in place "
                "(the fi_patches layer inside it is now a pass-through)",
                self.describe(),
            )
        self._installed = None


_INHERITED = object()
"""What a class's own namespace held for an attribute when it only inherited it."""


def _put_back(cls: type, name: str, installed: Any, own: Any) -> bool:
    """Restore ``cls.name`` to ``own``, what the class's own namespace held before fi_patches
    set ``installed`` there (deleting the attribute where ``own`` is :data:`_INHERITED`), if
    ``installed`` is still there; False, leaving it in place, when something replaced it after
    us."""
    if vars(cls).get(name) is not installed:
        return False
    if own is _INHERITED:
        type.__delattr__(cls, name)
    else:
        type.__setattr__(cls, name, own)
    return True


class WhileFlagged:
    """Keeps ``inner`` applied only while some instance of ``owner`` has its attribute ``flag``
    set to a true value, so a wrapper that acts only then costs nothing the rest of the time.

    A ``__setattr__`` of fi_patches' own on ``owner`` (the class's own, or the one it inherits,
    does the assignment first) sees each assignment of ``flag`` and applies or reverts
    ``inner`` when the first instance sets it or the last one clears it; ``instances()`` names
    the instances that may have set it before this patch was applied. Revert removes both.
    Applying ``inner`` on an assignment never raises into the assigning code: a failure is
    logged once and the assignment stands."""

    def __init__(
        self,
        owner: type,
        flag: str,
        inner: AttributePatch,
        instances: Callable[[], Iterable[Any]],
    ) -> None:
        self.owner = owner
        self.flag = flag
        self.inner = inner
        self.instances = instances
        self.active = False
        self._lock = threading.RLock()
        self._set: weakref.WeakSet[Any] = weakref.WeakSet()
        self._sticky = False
        """Set once a flagged instance took no weak reference: ``inner`` then stays applied."""
        self._own: Any = _INHERITED
        self._installed: Any = None

    def describe(self) -> str:
        return f"{self.inner.describe()} (while {self.owner.__qualname__}.{self.flag} is set)"

    def apply(self) -> None:
        if self.active:
            return
        self.inner.check()
        # Read before the hook is installed and outside the lock: an instance created now runs
        # its own assignments through the hook (and FlashInfer creates its tuner under a lock).
        known = list(self.instances())
        self._own = vars(self.owner).get("__setattr__", _INHERITED)
        setter: Any = self.owner.__setattr__  # what assigns now: the class's own or inherited
        flag, watch = self.flag, self

        def __setattr__(obj: Any, name: str, value: Any) -> None:
            setter(obj, name, value)
            if name == flag:
                watch._changed(obj, value)

        __setattr__.__wrapped__ = setter  # type: ignore[attr-defined]
        with self._lock:
            type.__setattr__(self.owner, "__setattr__", __setattr__)
            self._installed = __setattr__
            try:
                wanted = False
                for instance in known:
                    if getattr(instance, flag, False):
                        wanted = self._note(instance, True)
                if wanted:
                    self.inner.apply()
            except BaseException:
                self._remove_hook()
                self._set, self._sticky = weakref.WeakSet(), False
                raise
            self.active = True

    def _note(self, obj: Any, value: Any) -> bool:
        """Record that ``obj`` set the flag to ``value``; whether ``inner`` is wanted now."""
        if value:
            try:
                self._set.add(obj)
            except TypeError:  # takes no weak reference: keep ``inner`` from now on
                self._sticky = True
        else:
            self._set.discard(obj)
        return self._sticky or len(self._set) > 0

    def _changed(self, obj: Any, value: Any) -> None:
        try:
            with self._lock:
                if not self.active:
                    return
                wanted = self._note(obj, value)
                if wanted and not self.inner.active:
                    self.inner.apply()
                elif not wanted and self.inner.active:
                    self.inner.revert()
        except Exception:
            log_once(
                logger,
                logging.ERROR,
                f"flag:{self.describe()}",
                "fi_patches could not follow %s.%s; %s stays as it is",
                self.owner.__qualname__,
                self.flag,
                self.inner.describe(),
                exc_info=True,
            )

    def revert(self) -> None:
        with self._lock:
            if not self.active:
                return
            self.active = False
            self._remove_hook()
            self.inner.revert()
            self._set = weakref.WeakSet()
            self._sticky = False

    def _remove_hook(self) -> None:
        if not _put_back(self.owner, "__setattr__", self._installed, self._own):
            logger.warning(
                "%s.__setattr__ was replaced after fi_patches wrapped it; leaving it in place "
                "(the fi_patches layer inside it now does nothing)",
                self.owner.__qualname__,
            )
        self._installed = None


_lock = threading.RLock()


def all_subclasses(base: type) -> list[type]:
    """Every live class deriving from ``base``, at any depth."""
    found: list[type] = []
    seen: set[int] = set()
    stack = [base]
    while stack:
        subclasses: list[type] = type.__subclasses__(stack.pop())
        for sub in subclasses:
            if id(sub) not in seen:
                seen.add(id(sub))
                found.append(sub)
                stack.append(sub)
    return found


class _SubclassWatch:
    """Calls listeners for each new subclass of ``base`` while at least one is registered."""

    def __init__(self, base: type) -> None:
        self.base = base
        self.listeners: list[Callable[[type], None]] = []
        self._own: Any = _INHERITED
        self._installed: Any = None

    def add(self, listener: Callable[[type], None]) -> None:
        if not self.listeners:
            self._install()
        self.listeners.append(listener)

    def remove(self, listener: Callable[[type], None]) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)
        if not self.listeners:
            self._uninstall()

    def _install(self) -> None:
        self._own = vars(self.base).get("__init_subclass__", _INHERITED)
        watch = self
        base = self.base

        def __init_subclass__(cls: type, **kwargs: Any) -> None:
            if watch._own is not _INHERITED:
                watch._own.__get__(None, cls)(**kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type, misc]
            for listener in list(watch.listeners):
                try:
                    listener(cls)
                except Exception:
                    log_once(
                        logger,
                        logging.ERROR,
                        f"subclass:{cls.__qualname__}",
                        "fi_patches could not patch new class %s; it runs unpatched",
                        cls.__qualname__,
                        exc_info=True,
                    )

        self._installed = classmethod(__init_subclass__)
        type.__setattr__(self.base, "__init_subclass__", self._installed)

    def _uninstall(self) -> None:
        _put_back(self.base, "__init_subclass__", self._installed, self._own)
        self._installed = None


_watches: dict[int, _SubclassWatch] = {}


def _watch(base: type) -> _SubclassWatch:
    watch = _watches.get(id(base))
    if watch is None or watch.base is not base:
        watch = _watches[id(base)] = _SubclassWatch(base)
    return watch


_PRUNE_MIN = 64
"""How many wrapped classes :class:`RunnerMethodPatch` lists before it drops the dead ones."""

_OURS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every wrapper :class:`RunnerMethodPatch` made (its ``__wrapped__`` is the method it wraps),
so a caller can reach FlashInfer's own method past it and past anything wrapped over it."""


def stock_method(cls: type, method: str) -> Any:
    """``cls``'s ``method`` as FlashInfer defines it: the function its MRO resolves, unwrapped
    (``__wrapped__``) past a wrapper of fi_patches' and anything someone wrapped over it, never
    past FlashInfer's own decorators."""
    return unwrap_own(getattr(cls, method), _OURS.__contains__)


class RunnerMethodPatch:
    """Wraps ``method`` of subclasses of ``base`` by class name (any module, as FlashInfer's
    tuner keys name them), those that exist now and those created later, and of any class
    handed to :meth:`add_class` while applied. A class that inherits the method gets the
    wrapper as its own attribute (FlashInfer's MoE runners inherit ``get_valid_tactics`` from a
    shared base, and the tuner keys them by their own name), removed again on revert. Names and
    classes can be added while applied; :meth:`revert` restores every class it wrapped.
    ``make(name)`` builds the replacement factory for a class of that name."""

    def __init__(self, base: type, method: str, make: Callable[[str], Replacement]) -> None:
        self.base = base
        self.method = method
        self.make = make
        self.active = False
        self.names: set[str] = set()
        self._patched: list[tuple[weakref.ref[type], Any, Any]] = []
        self._prune_at = _PRUNE_MIN
        self._wrapped: weakref.WeakSet[type] = weakref.WeakSet()
        # The wrapper made for each class, kept across revert and apply: a class wrapped again
        # gets the same wrapper (inert while this patch is not active), not a new one.
        self._made: weakref.WeakKeyDictionary[type, tuple[Any, Any]] = weakref.WeakKeyDictionary()

    def describe(self) -> str:
        return f"{self.base.__module__}.<runner classes>.{self.method}"

    def _on_new_class(self, cls: type) -> None:
        if cls.__name__ in self.names:
            self.add_class(cls)

    def add_names(self, names: Iterable[str]) -> None:
        """Wrap every live subclass named in ``names``, and the ones created from now on."""
        with _lock:
            new = set(names) - self.names
            if not new or not self.active:
                return
            self.names |= new
            for cls in all_subclasses(self.base):
                if cls.__name__ in new:
                    self.add_class(cls)

    def add_class(self, cls: type) -> None:
        """Wrap ``cls``'s ``method`` (once), its own or the one it inherits, under its name."""
        with _lock:
            if not self.active or cls in self._wrapped:
                return
            own = vars(cls).get(self.method, _INHERITED)
            original = stock_method(cls, self.method) if own is _INHERITED else own
            if not callable(original):
                self._wrapped.add(cls)
                return
            made = self._made.get(cls)
            if made is not None and made[0] is original:
                installed = made[1]
            else:
                installed = self.make(cls.__name__)(original, self)
                installed.__wrapped__ = original  # type: ignore[attr-defined]  # inspect.unwrap
                _OURS.add(installed)
                self._made[cls] = (original, installed)
            type.__setattr__(cls, self.method, installed)
            self._wrapped.add(cls)
            if len(self._patched) >= self._prune_at:
                # Dropped in bulk, not on every add: before 0.7.4 FlashInfer builds a class per
                # call, so thousands may be wrapped while a block is open.
                self._patched = [entry for entry in self._patched if entry[0]() is not None]
                self._prune_at = max(_PRUNE_MIN, 2 * len(self._patched))
            self._patched.append((weakref.ref(cls), own, installed))

    def apply(self) -> None:
        with _lock:
            if self.active:
                return
            self.active = True
            try:
                _watch(self.base).add(self._on_new_class)
            except Exception:
                self.revert()
                raise

    def revert(self) -> None:
        with _lock:
            if not self.active and not self._patched:
                return
            self.active = False
            _watch(self.base).remove(self._on_new_class)
            for ref, original, installed in reversed(self._patched):
                cls = ref()
                if cls is None:
                    continue
                if not _put_back(cls, self.method, installed, original):
                    logger.warning(
                        "%s.%s was replaced after fi_patches wrapped it; leaving it in place",
                        cls.__qualname__,
                        self.method,
                    )
            self._patched = []
            self._prune_at = _PRUNE_MIN
            self._wrapped = weakref.WeakSet()
            self.names = set()

    def wrapped(self) -> list[type]:
        """The live classes wrapped now."""
        return [cls for ref, _, _ in self._patched if (cls := ref()) is not None]
