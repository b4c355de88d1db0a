"""Lazy public names for a package (PEP 562): each name's module is imported on first use.

    __getattr__, __dir__ = lazy_exports(__name__, {"EdgeClient": "fedort.edge_client.client.edge_client"}, globals())

Keeps `import fedort`, `import fedort.edge_client` and `import fedort.simulations` cheap: nothing
heavy (ONNX Runtime, gRPC, the coordinator) loads until a name that needs it is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of `package` for `exports` (public name -> module)."""
    short = package.rsplit(".", 1)[-1] if package != "fedort" else package

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {short!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
