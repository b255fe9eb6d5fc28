"""Registry of anonymization methods selectable by name (``method:`` in the config).

A method turns training embeddings into a fitted modifier (see :class:`Method`). Importing
this package imports every method module so their modifier kinds are registered for
:func:`mass.modifier.load_modifier`.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import nn

from mass.errors import ConfigError
from mass.io import EmbeddingDataset


@dataclass
class FitResult:
    """What a method returns: the modifier and what it learned on the way."""

    modifier: nn.Module  # a registered modifier kind: forward(x, seeds=None) -> x'
    branches: dict[str, nn.Module] = field(default_factory=dict)  # frozen judges, if any
    history: list[dict[str, float]] = field(default_factory=list)  # one dict per epoch
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class Method(Protocol):
    """``fit`` learns a modifier that suppresses ``suppress`` and preserves ``preserve``."""

    name: str

    def fit(
        self,
        train: EmbeddingDataset,
        *,
        suppress: list[str],
        preserve: list[str],
        params: dict[str, Any],
        val: EmbeddingDataset | None = None,
        seed: int = 0,
        progress: bool = True,
    ) -> FitResult: ...


METHODS: dict[str, type] = {}


def register_method(name: str):
    """Class decorator: make a method selectable by ``name``."""

    def wrap(cls: type) -> type:
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


def _import_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


_import_all()
