"""Beam job: raw column (image/text) -> Triton feature extractor -> embedding dataset Parquet
(see beam_pipelines/extract.py)."""

from mass.commands._beam_job import beam_job

HELP = "Beam job: raw column -> Triton feature extractor -> embeddings Parquet"
add_arguments, run = beam_job("beam_pipelines.extract", "plan_extract")
