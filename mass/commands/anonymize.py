"""Beam job: embeddings -> Triton modifier -> privatized release (fail-closed, atomic),
published only if the audit of the staged release passes (see beam_pipelines/anonymize.py)."""

from mass.commands._beam_job import beam_job

HELP = "Beam job: embeddings -> Triton modifier -> privatized release Parquet"
add_arguments, run = beam_job("beam_pipelines.anonymize", "plan_anonymize")
