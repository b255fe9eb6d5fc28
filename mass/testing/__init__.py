"""Stand-ins for tests, examples and benchmarks: importable, so Beam workers can load them
(:mod:`.stand_ins`), and the local S3 / dask services (:mod:`.services`)."""
