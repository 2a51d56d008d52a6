"""The interpreter start-up hook: ``fi_patches_auto.pth`` in site-packages calls
:func:`install` when ``FI_PATCHES_AUTO`` is set (in the manner of coverage's process start-up
hook). Without the variable the ``.pth`` line only reads ``os.environ``.

:func:`install` puts one finder on ``sys.meta_path`` that waits for ``import flashinfer``, lets
the regular finders and loader import it, then activates the default pins
(:func:`fi_patches.activation.enable`) and takes itself off ``sys.meta_path``. It imports
nothing beyond what the interpreter has loaded already: a serving host starts many workers,
and each pays what this module costs.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing would cost every interpreter start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

ENV = "FI_PATCHES_AUTO"
"""``fi_patches._env.AUTO``, spelled out: this module imports nothing, as every interpreter start
pays for what it imports (``tests/test_startup_hook.py`` checks the two agree)."""
PTH_NAME = "fi_patches_auto.pth"
TARGET = "flashinfer"

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
"""``fi_patches._env``'s boolean words, spelled out for the same reason (the test checks)."""

PTH_LINE = (
    f"import os; os.environ.get({ENV!r}, '').strip().lower() not in {FALSE_WORDS!r} and "
    "(u := __import__('importlib.util').util).find_spec('fi_patches') is not None and "
    "u.find_spec('fi_patches.startup') is not None and "
    "__import__('fi_patches.startup').startup.from_pth()"
)
"""The one line of ``fi_patches_auto.pth`` (``site`` runs lines that start with ``import``).
It asks for fi_patches only when the variable is not off, and is silent when fi_patches is
gone (the file left behind by ``pip uninstall`` of an editable install)."""


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``FI_PATCHES_AUTO`` asks for activation at start-up (as ``_env`` reads a
    boolean: a value neither on nor off is off)."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return value.strip().lower() in TRUE_WORDS


def from_pth() -> None:
    """What the ``.pth`` line runs when the variable is not off: :func:`install` when it is on;
    otherwise (a value that is not a boolean) the one warning ``_env`` gives, and nothing else."""
    if requested():
        install()
        return
    try:
        from fi_patches import _env

        _env.flag(_env.AUTO)
    except Exception:
        return  # at interpreter start; the hook stays off either way


class _Loader:
    """The regular loader of ``flashinfer``, with the activation run after it executed the
    module. It puts the regular loader back on the module and its spec before executing, so
    nothing of this hook stays visible on ``flashinfer`` afterwards."""

    def __init__(self, loader: object, finder: _Finder) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: object) -> object:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        self._loader.exec_module(module)  # type: ignore[attr-defined]
        self._finder.fire(module)

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)


class _Finder:
    """A ``sys.meta_path`` finder that runs ``callback`` once, after ``name`` is imported."""

    def __init__(self, name: str, callback: Callable[[ModuleType], object]) -> None:
        self.name = name
        self.callback = callback
        self.fired = False
        self._searching = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name or self._searching or self.fired:
            return None
        self._searching = True
        try:
            spec: ModuleSpec | None = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None) if finder is not self else None
                if find is not None:
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
        except Exception:
            return None  # the regular import machinery runs and reports it
        finally:
            self._searching = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        spec.loader = _Loader(loader, self)  # type: ignore[union-attr]
        return spec

    def fire(self, module: ModuleType) -> None:
        """Run the callback (once) and leave ``sys.meta_path``; never raises into the import."""
        if self.fired:
            return
        self.fired = True
        remove()
        try:
            self.callback(module)
        except Exception:
            import logging

            logging.getLogger("fi_patches.startup").exception(
                "fi_patches' start-up hook failed; FlashInfer is left stock"
            )


def _activate(module: ModuleType) -> None:
    from fi_patches.activation import enable

    enable()


def install() -> None:
    """Activate the default pins when FlashInfer is imported (at once if it already is).
    Idempotent; never raises, as it runs at interpreter start."""
    try:
        if any(_is_ours(f) for f in sys.meta_path):
            return  # the .pth line ran again (two site directories, two copies of the package)
        finder = _Finder(TARGET, _activate)
        module = sys.modules.get(TARGET)
        if module is not None:
            finder.fire(module)
            return
        sys.meta_path.insert(0, finder)
    except Exception:
        import logging

        logging.getLogger("fi_patches.startup").exception(
            "fi_patches' start-up hook could not be installed; FlashInfer is left stock"
        )


def _is_ours(finder: object) -> bool:
    """A start-up finder of fi_patches, of this copy of the module or of another one."""
    kind = type(finder)
    return kind.__name__ == _Finder.__name__ and kind.__module__ == _Finder.__module__


def remove() -> None:
    """Take the start-up finder off ``sys.meta_path`` (if it is there). A new list replaces
    the old one, so an import that another thread is resolving over the old list meanwhile
    skips no finder."""
    if any(_is_ours(f) for f in sys.meta_path):
        sys.meta_path = [f for f in sys.meta_path if not _is_ours(f)]


def pending() -> bool:
    """Whether the start-up finder still waits for ``import flashinfer``."""
    return any(_is_ours(f) for f in sys.meta_path)
