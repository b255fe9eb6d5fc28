"""Benchmarks behind `mass bench`: quality (this package's quality.py), compare, throughput.

Each module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and writes JSON plus a
Markdown table.
"""
