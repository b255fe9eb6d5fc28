"""Names as a user writes them: lists of attribute or column names, and the column flags.

A list of names is ``"a,b"`` (a flag, a params.yaml string) or a list of strings (YAML, the
Python API); blanks around and between the commas are dropped. Every command, the config, the
audit policy and the API read it through :func:`parse_names` (flags: :func:`split_names` as
argparse's ``type``), so a list means the same everywhere and a bad one gets one error naming
where it was given; a name given twice is refused there too. :func:`add_column_arguments` adds
``--id-col`` / ``--emb-col``, the data contract's two columns, to every command that reads
embeddings.
"""

from __future__ import annotations

import argparse
from typing import Any

from mass.errors import ConfigError

ID_HELP = "row id column (unique integers or strings; what keyed noise and joins use)"
EMB_HELP = "embedding column (fixed-size list of float32)"


def split_names(text: str | None) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``; None or blank -> ``()``."""
    return tuple(v.strip() for v in (text or "").split(",") if v.strip())


def parse_names(value: Any, *, where: str) -> tuple[str, ...]:
    """A comma-separated string or a list/tuple of strings as a tuple of names (None: none);
    anything else is a :class:`ConfigError` naming ``where`` (the flag or parameter)."""
    if value is None or isinstance(value, str):
        names = split_names(value)
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        names = tuple(value)
    else:
        raise ConfigError(
            f"{where}: expected a list of names or a comma-separated string, got {value!r}"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{where}: {', '.join(map(repr, twice))} named more than once; "
                          "name each once")  # fmt: skip
    return names


def add_column_arguments(parser: argparse.ArgumentParser, *, emb_help: str = EMB_HELP) -> None:
    """``--id-col`` (default ``id``) and ``--emb-col`` (default ``emb``)."""
    parser.add_argument("--id-col", default="id", help=ID_HELP)
    parser.add_argument("--emb-col", default="emb", help=emb_help)
