"""Write coloured MNIST-5k (images + labels) as seeded 60/20/20 Parquet splits.

Background colour follows the digit with probability RHO (Biased-MNIST); RHO = 0.1 makes
colour and digit independent. Output: OUT/{train,val,test}.parquet (docs/contracts.md).
"""

from __future__ import annotations

import argparse
import logging

from mass.demo.coloured_mnist import write_splits

HELP = "write coloured MNIST-5k (images + labels) to Parquet splits"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="data/raw", help="output directory (default data/raw)")
    parser.add_argument(
        "--rho",
        type=float,
        default=0.1,
        help="probability that the background has the digit's own colour",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the split and the colours")


def run(args: argparse.Namespace) -> int:
    paths = write_splits(args.out, rho=args.rho, seed=args.seed)
    for name, path in paths.items():
        log.info("wrote %s split: %s", name, path)
    return 0
