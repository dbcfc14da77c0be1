"""Package names imported from their submodules on first use (PEP 562), so that
importing ``nvfp4_aot`` or ``nvfp4_aot.jax`` imports nothing heavy."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str], namespace: dict):
    """``(__getattr__, __dir__)`` for ``package``: name ``n`` comes from submodule
    ``exports[n]`` the first time it is looked up, then stays in ``namespace``."""

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
