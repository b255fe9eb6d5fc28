"""Beam job: embeddings -> Triton modifier -> privatized release (fail-closed, atomic),
published only if the audit of the staged release passes (see beam_pipelines/anonymize.py).

Unknown flags (``--runner DaskRunner --dask_client_address ...``) go to Beam unchanged.
"""

from __future__ import annotations

import argparse

HELP = "Beam job: embeddings -> Triton modifier -> privatized release Parquet"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from beam_pipelines.anonymize import add_arguments as add

    add(parser)
    parser.set_defaults(_accepts_extra=True)


def run(args: argparse.Namespace) -> int:
    from beam_pipelines.anonymize import run_job

    run_job(args, list(getattr(args, "_extra", [])))
    return 0
