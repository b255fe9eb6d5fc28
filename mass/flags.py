"""The command-line contract every ``mass`` command keeps: a flag the command does not have is
an error naming it (with the nearest flag it does have), raised before any work.

The Beam jobs (`mass extract`, `mass anonymize`) also take Beam pipeline options, by one
documented route: flags that Beam itself registers, or anything after a literal ``--``; Beam
must know each of them either way (:func:`beam_pipelines.options.beam_flags`).
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable

from mass.errors import UnknownFlagError

BEAM_ROUTE = "Beam pipeline options: the flags Beam registers, as they are or after a literal --"


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every long option of ``parser`` (``--policy``, ...), in definition order."""
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]


def split_tail(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` before and after its first literal ``--`` (the tail is Beam's)."""
    if "--" not in argv:
        return list(argv), []
    i = argv.index("--")
    return list(argv[:i]), list(argv[i + 1 :])


def unknown_flag(
    tokens: Iterable[str], candidates: Iterable[str], hint: str = ""
) -> UnknownFlagError:
    """The error for the first unknown token of ``tokens``: names it and, when one is close,
    the flag the user probably meant (from ``candidates``, the flags the command takes)."""
    tokens = list(tokens)
    flag = next((t for t in tokens if t.startswith("-")), tokens[0])
    if not flag.startswith("-"):
        return UnknownFlagError(f"unexpected argument {flag!r}; nothing was run")
    name = flag.split("=", 1)[0]
    close = difflib.get_close_matches(name, list(dict.fromkeys(candidates)), n=1, cutoff=0.6)
    guess = f"; did you mean {close[0]}?" if close else ""
    more = f" ({hint})" if hint else ""
    return UnknownFlagError(f"unknown flag {name}{guess}; nothing was run{more}")


def check_no_extra(parser: argparse.ArgumentParser, extra: list[str]) -> None:
    """A command without Beam options: any leftover token is an error."""
    if extra:
        raise unknown_flag(extra, option_strings(parser))
