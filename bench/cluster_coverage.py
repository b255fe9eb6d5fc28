"""How often a judge's 95 % upper bound on a cell release reaches the judge's mean reading
(docs/audit.md, "Rows that share a released vector").

Per draw: ``--cells`` random unit vectors in 16 dimensions, ``--rows`` rows each given one of
them at random (a cell release), S drawn per row from its cell's share, the judge retrained on
the release out of fold (``--folds``; the gate's families, or the lookup table) and three
standard errors of its accuracy:

- binomial: rows independent (what every judge used before session 30);
- cluster-robust: each released vector a cluster (:func:`mass.metrics.scores.clustered_se`,
  what the gate now uses for every retrained judge);
- jackknife: binomial plus (k - 1)/k times the spread, over the k fold models, of each
  model's accuracy on every row (a delete-a-fold jackknife of the learned rule; not built).

Over ``--draws`` draws the judge's mean reading stands for its expectation; printed: the mean,
the readings' SD, each error's mean and its bound's coverage (the share of draws whose
accuracy + 1.96 SE reaches the mean; a two-sided 95 % bound should reach it 0.975 of the
time). ``--pattern``: ``null`` (4 classes 0.2/0.2/0.27/0.33, independent of the cells),
``smooth`` (binary, share 0.5 + d sign(v_0): a half-space a linear judge can hold) or ``xor``
(binary, 0.5 + d sign(v_0 v_1): one it cannot, so its boundary moves from fit to fit).

    python bench/cluster_coverage.py --judge logreg --pattern xor --share 0.2 \\
        [--rows 2000] [--cells 120] [--draws 200] [--folds 10]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

JUDGES = ("lookup", "logreg", "knn", "gboost", "mlp")


def draw(rows: int, cells: int, pattern: str, share: float, seed: int):
    """(cell vectors, each row's cell, S) of one seeded draw."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(cells, 16))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    code = rng.integers(0, cells, rows)
    if pattern == "null":
        return v, code, rng.choice(4, rows, p=[0.2, 0.2, 0.27, 0.33])
    side = np.sign(v[:, 0]) if pattern == "smooth" else np.sign(v[:, 0] * v[:, 1])
    return v, code, (rng.random(rows) < 0.5 + share * side[code]).astype(np.int64)


def reading(judge: str, v: np.ndarray, code: np.ndarray, y: np.ndarray, folds: int) -> dict:
    """One draw's accuracy and its three standard errors."""
    from mass.metrics.attackers import _fit_predict
    from mass.metrics.scores import clustered_se, table_predict
    from mass.metrics.strata import cv_folds

    m, k = len(v), int(y.max()) + 1
    splits = list(cv_folds(y, folds, 0))
    pred, rules = np.empty_like(y), np.empty((len(splits), m), dtype=y.dtype)
    for f, (tr, te) in enumerate(splits):
        rules[f] = (table_predict(code[tr], y[tr], np.arange(m), m, k) if judge == "lookup"
                    else _fit_predict(judge, 0, v[code[tr]], y[tr], v))  # fmt: skip
        pred[te] = rules[f][code[te]]
    acc = float((pred == y).mean())
    binomial = np.sqrt(acc * (1 - acc) / len(y))
    theta = (rules[:, code] == y).mean(axis=1)  # each fold model's accuracy on every row
    jack = (len(splits) - 1) / len(splits) * float(np.sum((theta - theta.mean()) ** 2))
    return {"accuracy": acc, "binomial": binomial, "cluster": clustered_se(y, pred, code),
            "jackknife": float(np.sqrt(binomial**2 + jack))}  # fmt: skip


def summary(rows: list[dict]) -> dict:
    """The readings' mean and SD; each error's mean and its 1.96 bound's coverage."""
    acc = np.array([r["accuracy"] for r in rows])
    out = {"draws": len(rows), "mean": round(float(acc.mean()), 4),
           "observed_sd": round(float(acc.std()), 4)}  # fmt: skip
    for e in ("binomial", "cluster", "jackknife"):
        se = np.array([r[e] for r in rows])
        out[e] = {"mean_se": round(float(se.mean()), 4),
                  "coverage": round(float((acc + 1.96 * se >= acc.mean()).mean()), 3)}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--judge", choices=JUDGES, default="logreg")
    p.add_argument("--pattern", choices=("null", "smooth", "xor"), default="xor")
    p.add_argument("--share", type=float, default=0.2, help="d: cell shares 0.5 +- d")
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--cells", type=int, default=120)
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--folds", type=int, default=10)
    a = p.parse_args(argv)
    if not 0.0 <= a.share < 0.5:
        p.error(f"--share {a.share}: must be in [0, 0.5)")
    t0 = time.perf_counter()
    rows = [reading(a.judge, *draw(a.rows, a.cells, a.pattern, a.share, d), a.folds)
            for d in range(a.draws)]  # fmt: skip
    print(json.dumps({"judge": a.judge, "pattern": a.pattern, "share": a.share,
                      "rows": a.rows, "cells": a.cells, "folds": a.folds, **summary(rows),
                      "seconds": round(time.perf_counter() - t0, 1)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
