"""What the Beam-job commands (`mass extract`, `mass anonymize`) share: the pipeline module
owns the flags and the job; the command imports it only when the command is chosen, so
`mass --help` and every other command stay free of Beam.

Unknown flags (``--runner DaskRunner --dask_client_address ...``) go to Beam unchanged.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable


def beam_job(pipeline: str) -> tuple[Callable, Callable]:
    """(add_arguments, run) of a command that runs ``pipeline``'s ``run_job``."""

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        importlib.import_module(pipeline).add_arguments(parser)
        parser.set_defaults(_accepts_extra=True)

    def run(args: argparse.Namespace) -> int:
        importlib.import_module(pipeline).run_job(args, list(getattr(args, "_extra", [])))
        return 0

    return add_arguments, run
