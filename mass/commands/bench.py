"""Benchmarks: `mass bench quality | compare | throughput` (JSON + Markdown).

mass bench quality --data-root data --out bench/results/quality [--quick]
"""

from __future__ import annotations

import argparse
import importlib
import sys

HELP = "benchmarks: quality, compare, throughput (JSON + Markdown)"
SUBCOMMANDS = {
    "quality": ("mass.bench.quality", "MaSS suppression/preservation quality (Tables 2, 8, 9)"),
    "compare": ("mass.bench.compare", "MaSS against the comparison methods"),
    "throughput": ("mass.bench.throughput", "rows/s of the anonymize pipeline"),
}


def _load(name: str):
    modname = SUBCOMMANDS[name][0]
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name != modname:
            raise
        return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    wanted = next((a for a in sys.argv[1:] if a in SUBCOMMANDS), None)
    for name, (_, help_) in SUBCOMMANDS.items():
        mod = _load(name) if wanted in (None, name) else None
        sp = sub.add_parser(name, help=help_ if mod or wanted else f"{help_} (not installed)")
        if mod is not None:
            mod.add_arguments(sp)
        sp.set_defaults(_bench_module=name)


def run(args: argparse.Namespace) -> int:
    name = args.bench
    mod = _load(name)
    if mod is None:
        print(
            f"mass bench {name}: error: {SUBCOMMANDS[name][0]} is not available in this "
            "installation (the module is missing); nothing was run",
            file=sys.stderr,
        )
        return 2
    return int(mod.run(args) or 0)
