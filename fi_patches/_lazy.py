"""PEP 562 lazy exports, so ``import fi_patches`` (and its feature packages) import neither
torch, cutlass nor FlashInfer until a name that needs them is used."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's, which would cost every start of the start-up hook
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name of ``exports`` is imported from
    its module on first use and then kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib  # here, not at import: the start-up hook imports the package

        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
