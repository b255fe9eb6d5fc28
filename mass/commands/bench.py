"""Benchmarks, from a source checkout: `mass bench NAME ARGS` runs `python bench/NAME.py ARGS`.

The benchmarks are scripts under the checkout's top-level ``bench/`` directory, not part of
the installed library (``mass`` never imports them); this command only finds the script and
runs it in a new Python process with the same interpreter, passing ARGS through unchanged
(`mass bench quality --help` shows the script's own options). Exit status: the script's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HELP = "run a benchmark script under bench/ of a source checkout (JSON + Markdown)"
SCRIPTS = {
    "quality": "MaSS suppression/preservation quality (paper Tables 2, 8, 9)",
    "compare": "MaSS against the comparison methods, same splits",
    "throughput": "rows/s and peak RSS of the anonymize path vs its in-process limit",
    "throughput_scale": "in one run: the limit, the job on Triton, 2-worker Dask, S3 vs local disk",
    "denoising_attack": "the public-id denoising attack on a release, with and without the key",
    "adaptive_study": "one MaSS setting against attackers retrained on its output",
    "generalize": "calibrated `mass train` on scikit-learn datasets nobody tuned it for",
    "realdata": "packaged public tables and MiniLM text sets at user scale, every method",
    "small_row_groups": "`mass anonymize` on one file of thousands of tiny row groups",
    "objstore": "`mass anonymize` on local disk vs an S3-compatible store, FnApiRunner vs Dask",
    "device_check": "the served modifiers on cuda vs the CPU: equal rows, kept cells, rows/s",
    "memory": "peak RSS of mass audit (per partition), train and anonymize at 1M and 10M rows",
}


def bench_dir() -> Path:
    """``bench/`` beside the ``mass`` package: present in a checkout, absent from a wheel."""
    return Path(__file__).resolve().parents[2] / "bench"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "bench",
        metavar="NAME",
        choices=sorted(SCRIPTS),
        help="the benchmark: " + "; ".join(f"{k}: {v}" for k, v in SCRIPTS.items()),
    )
    p.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="passed to bench/NAME.py unchanged (`mass bench NAME --help` lists them)",
    )


def run(args: argparse.Namespace) -> int:
    script = bench_dir() / f"{args.bench}.py"
    if not script.is_file():
        print(
            f"mass bench {args.bench}: error: {script} not found; the benchmarks are scripts in "
            "a source checkout of MaSS-ETL (its bench/ directory), not part of the installed "
            "package; clone the repository and run this from there; nothing was run",
            file=sys.stderr,
        )
        return 2
    return subprocess.call([sys.executable, str(script), *args.args])
