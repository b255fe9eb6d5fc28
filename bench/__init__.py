"""Benchmarks of MaSS-ETL: scripts run from a checkout, never part of the installed library.

Each entry script (``python bench/NAME.py ...``, or ``mass bench NAME ...`` from a checkout)
prints JSON and writes it to ``--out``; nothing is asserted. Helpers shared by several
benchmarks live beside them (``measure.py``, ``throughput_parts/``, ``compare_*.py``).
The dependency points one way: ``bench`` imports ``mass``, ``transforms`` and
``beam_pipelines``; nothing there imports ``bench`` (tests/test_layers.py checks it).
"""
