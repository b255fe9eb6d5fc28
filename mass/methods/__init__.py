"""Registry of anonymization methods selectable by name (``method:`` in the config).

A method *fits* a modifier (:class:`mass.methods.base.Method`, with a typed params dataclass
each); what it fits is one of the servable kinds of :mod:`mass.modifiers`. Methods import
modifiers, never the reverse: loading a modifier.pt needs none of this package.
"""

from __future__ import annotations

import importlib
import pkgutil

from mass.errors import ConfigError
from mass.methods.base import FitResult, Method, Params

METHODS: dict[str, type[Method]] = {}
_HELPERS = ("base", "_common")  # modules that define no method


def register_method(name: str):
    """Class decorator: make a method selectable by ``name``."""

    def wrap(cls: type[Method]) -> type[Method]:
        if name in METHODS and METHODS[name] is not cls:
            raise ValueError(f"method {name!r} registered twice")
        METHODS[name] = cls
        cls.name = name
        return cls

    return wrap


def get_method(name: str) -> Method:
    _import_all()
    if name not in METHODS:
        raise ConfigError(f"method: unknown method {name!r}; choose one of {sorted(METHODS)}")
    return METHODS[name]()


def method_names() -> list[str]:
    """Every registered method name, sorted (what ``--method`` accepts)."""
    _import_all()
    return sorted(METHODS)


def _import_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _HELPERS:
            importlib.import_module(f"{__name__}.{info.name}")


__all__ = ["METHODS", "FitResult", "Method", "Params", "get_method", "method_names",
           "register_method"]  # fmt: skip

_import_all()
