"""What every anonymization method shares: a typed parameter dataclass and the ``fit`` contract.

A method *fits* a modifier (:mod:`mass.modifiers` holds what is applied): ``Method.fit`` parses
``params`` into the method's frozen :class:`Params` subclass (unknown keys and wrong types are
a :class:`ConfigError` naming them), then runs the method's ``fit_params``. ``resolve`` gives
the resolved configuration `mass train` writes to config.yaml and hashes, so the command
needs no method special cases.
"""

from __future__ import annotations

import time
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar

from torch import nn

from mass.errors import ConfigError
from mass.io import EmbeddingDataset
from mass.names import split_names


@dataclass
class FitResult:
    """What a method returns: the modifier and what it learned on the way."""

    modifier: nn.Module  # a registered modifier kind: forward(x, seeds=None) -> x'
    branches: dict[str, nn.Module] = field(default_factory=dict)  # frozen judges, if any
    history: list[dict[str, float]] = field(default_factory=list)  # one dict per epoch
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def knob(default: Any, *, lo: float | None = None, choices: tuple = (), help: str = "") -> Any:
    """A :class:`Params` field: ``lo`` is an inclusive lower bound, ``choices`` the valid values."""
    return field(default=default, metadata={"lo": lo, "choices": tuple(choices), "help": help})


@dataclass(frozen=True)
class Params:
    """Parameters every method accepts; each method subclasses it with its own typed fields."""

    seed: int = knob(0, help="seeds every random draw of the fit")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, *, method: str) -> Params:
        """Validated instance; a ConfigError names unknown keys, wrong types and bad values."""
        d = dict(d or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigError(f"params of method {method!r}: unknown key(s) {unknown}; "
                              f"known: {sorted(known)}")  # fmt: skip
        hints = typing.get_type_hints(cls)
        values = {k: _coerce(f"params.{k}", v, hints[k]) for k, v in d.items()}
        out = cls(**values)
        for f in fields(cls):
            v, lo, choices = getattr(out, f.name), f.metadata.get("lo"), f.metadata.get("choices")
            if lo is not None and v < lo:
                raise ConfigError(f"params.{f.name}={v}: must be >= {lo} (method {method!r})")
            if choices and v not in choices:
                raise ConfigError(f"params.{f.name}={v!r}: choose one of {list(choices)} "
                                  f"(method {method!r})")  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def describe(cls) -> str:
        """One line per parameter: name, type, default, help (for docs and --help)."""
        hints = typing.get_type_hints(cls)
        rows = []
        for f in fields(cls):
            default = f.default if f.default is not MISSING else "?"
            rows.append(f"{f.name} ({_type_name(hints[f.name])}, {default!r}): "
                        f"{f.metadata.get('help', '')}")  # fmt: skip
        return "\n".join(rows)


def _type_name(t: Any) -> str:
    return getattr(t, "__name__", str(t).replace("typing.", ""))


def _coerce(where: str, value: Any, t: Any) -> Any:
    """``value`` as type ``t`` (bool, int, float, str, tuple[int, ...]); else a ConfigError."""
    bad = ConfigError(f"{where}={value!r}: expected {_type_name(t)}")
    if t is bool:
        if isinstance(value, bool):
            return value
        if value in (0, 1) and not isinstance(value, float):
            return bool(value)
        raise bad
    if t is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise bad from None
        raise bad
    if t is float:
        if isinstance(value, bool):
            raise bad
        try:
            return float(value)  # YAML reads 1e-3 (no dot) as a string
        except (TypeError, ValueError):
            raise bad from None
    if t is str:
        if not isinstance(value, str):
            raise bad
        return value
    if typing.get_origin(t) is tuple:
        (item, *_) = typing.get_args(t)
        if isinstance(value, str):
            value = split_names(value)
        if not isinstance(value, (list, tuple)):
            raise bad
        return tuple(_coerce(f"{where}[{i}]", v, item) for i, v in enumerate(value))
    raise TypeError(f"{where}: unsupported parameter type {t!r}")


class Method:
    """``fit`` learns a modifier that suppresses ``suppress`` and preserves ``preserve``.

    Subclasses set ``Params`` (a frozen :class:`Params` subclass) and implement
    :meth:`fit_params`; :func:`mass.methods.register_method` makes them selectable by name.
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type] = Params

    @classmethod
    def fits_transductively(cls) -> bool:
        """Whether ``mass train --transductive`` may fit this method on the very rows it will
        release: declared by a ``transductive`` knob in its ``Params`` (the fit binds the
        modifier to those rows, :mod:`mass.fitrows`)."""
        return any(f.name == "transductive" for f in fields(cls.Params))

    def parse(self, params: Any, *, suppress: list[str], preserve: list[str],
              seed: int | None = None) -> Any:  # fmt: skip
        """``params`` (a mapping, or an instance of ``self.Params``) validated and typed."""
        if isinstance(params, self.Params):
            return params
        d = dict(params or {})
        if seed is not None:
            d.setdefault("seed", seed)
        return self.Params.from_dict(d, method=self.name)

    def resolve(self, params: Any, *, suppress: list[str], preserve: list[str]) -> dict:
        """The resolved configuration (defaults filled in) that config.yaml records."""
        p = self.parse(params, suppress=suppress, preserve=preserve)
        return {"method": self.name, "suppress": list(suppress), "preserve": list(preserve),
                **p.to_dict()}  # fmt: skip

    def fit(
        self,
        train: EmbeddingDataset,
        *,
        suppress: list[str],
        preserve: list[str],
        params: Any = None,
        val: EmbeddingDataset | None = None,
        seed: int = 0,
        progress: bool = True,
        **options: Any,
    ) -> FitResult:
        """Parse ``params``, fit; ``options`` (``run_dir``, ``resume``, ...) go to methods that
        use them and are ignored by the others."""
        p = self.parse(params, suppress=list(suppress), preserve=list(preserve), seed=seed)
        start = time.perf_counter()
        res = self.fit_params(train, p, suppress=list(suppress), preserve=list(preserve),
                              val=val, progress=progress, **options)  # fmt: skip
        res.seconds = res.seconds or time.perf_counter() - start
        return res

    def fit_params(self, train: EmbeddingDataset, p: Any, *, suppress: list[str],
                   preserve: list[str], val: EmbeddingDataset | None, progress: bool,
                   **options: Any) -> FitResult:  # fmt: skip
        raise NotImplementedError
