"""How tight the cell-release certificate is (mass.metrics.certificate); prints JSON lines.

    python bench/certificate.py [--rows 1000,2000,10000,50000] [--cells 2,10,100]
        [--draws 100] [--seed 0]

For each (rows, cells): ``draws`` samples of the ideal cell release for a balanced binary S -
every row's cell drawn uniformly and independently of S, so any attacker's accuracy and
balanced accuracy are exactly 0.5 - and the certificate's 95 % bounds on them (mean and 95th
percentile over the draws, and how many draws were refused as continuous). One line more per
size with S skewed in one cell of ten (P(s = 1 | cell) = 0.8 there, 0.5 elsewhere), to show
what the bound says when a cell does carry S. ``truth``: the Bayes-optimal accuracy and
balanced accuracy of that distribution, which each bound must cover (``missed``: draws whose
bound fell below it, at most ~5 % of them). Pure numpy, seconds.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from bench.entry import main as bench_main
from mass.metrics.certificate import certify_cells


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", default="1000,2000,10000,50000", help="audited rows, comma list")
    p.add_argument("--cells", default="2,10,100", help="cells of the release, comma list")
    p.add_argument("--draws", type=int, default=100, help="samples per setting")
    p.add_argument("--seed", type=int, default=0)


def _summary(bounds: list, key: str) -> dict:
    vals = np.array([getattr(c, key) for c in bounds if c.certified], dtype=float)
    if not vals.size:
        return {"mean": None, "p95": None}
    return {"mean": round(float(vals.mean()), 4), "p95": round(float(np.quantile(vals, 0.95)), 4)}


def _truth(joint: np.ndarray) -> dict:
    """The Bayes-optimal accuracy and balanced accuracy of P(cell, s) = ``joint``."""
    balanced = (joint / joint.sum(axis=0)).max(axis=1).sum() / joint.shape[1]
    return {"accuracy": round(float(joint.max(axis=1).sum()), 4),
            "balanced": round(float(balanced), 4)}  # fmt: skip


def _draws(rng, joint: np.ndarray, n: int, draws: int) -> list:
    k = joint.shape[1]
    flat = [rng.choice(joint.size, size=n, p=joint.ravel()) for _ in range(draws)]
    return [certify_cells(f // k, f % k) for f in flat]


def _line(kind: str, n: int, joint: np.ndarray, certs: list) -> dict:
    truth = _truth(joint)
    ok = [c for c in certs if c.certified]
    missed = {k: sum(getattr(c, k) < truth[k] - 1e-4 for c in ok) for k in truth}
    return {"kind": kind, "rows": n, "cells": joint.shape[0], "draws": len(certs),
            "truth": truth, "missed": missed,
            "refused": sum(not c.certified for c in certs),
            "accuracy": _summary(certs, "accuracy"), "balanced": _summary(certs, "balanced"),
            "plugin_balanced": _summary(certs, "plugin_balanced")}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(args.seed)
    skewed = np.full((10, 2), 0.05)
    skewed[0] = (0.02, 0.08)  # cell 0: P(s = 1 | cell) = 0.8; elsewhere 0.5
    for n in (int(v) for v in args.rows.split(",")):
        for k in (int(v) for v in args.cells.split(",")):
            joint = np.full((k, 2), 0.5 / k)
            line = _line("independent", n, joint, _draws(rng, joint, n, args.draws))
            print(json.dumps(line), flush=True)
        line = _line("one skewed cell of 10", n, skewed, _draws(rng, skewed, n, args.draws))
        print(json.dumps(line), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    return bench_main(__file__, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
