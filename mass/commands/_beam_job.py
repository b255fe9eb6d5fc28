"""What the Beam-job commands (`mass extract`, `mass anonymize`) share: the pipeline module
owns the flags and the job; the command imports it only when the command is chosen, so
`mass --help` and every other command stay free of Beam.

Beam pipeline options (``--runner DaskRunner --dask_client_address ...``) pass only as flags
Beam registers or after a literal ``--``; any other unknown flag is refused before any work
(:func:`beam_pipelines.options.beam_flags`).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable


def beam_job(pipeline: str, plan: str) -> tuple[Callable, Callable]:
    """(add_arguments, run) of a command that runs ``pipeline``'s ``run_job`` on the job's
    frozen plan, built once from the parsed flags by ``pipeline``'s function ``plan``."""

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        importlib.import_module(pipeline).add_arguments(parser)
        parser.set_defaults(_beam_flags=beam_flags)

    def run(args: argparse.Namespace, beam_args: list[str]) -> int:
        module = importlib.import_module(pipeline)
        module.run_job(getattr(module, plan)(args, beam_args))
        return 0

    return add_arguments, run


def beam_flags(extra: list[str], tail: list[str], ours: list[str]) -> list[str]:
    """The job's Beam options, checked (imported here: Beam loads only for a Beam job)."""
    from beam_pipelines.options import beam_flags as check

    return check(extra, tail, ours)
