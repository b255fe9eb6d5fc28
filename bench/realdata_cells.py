"""Cell resolution against the certificate on one realdata set: each ``ot_repair`` params
dict fitted on the set's training rows, its release of the release rows (key stripped)
certified (mass.metrics.certificate), R and the watch attributes read by one quick family.

    python bench/realdata_cells.py names '[{"cell_rows": 10, "cell_count": 98, "cell_axes": 2,
        "cells_by_preserved": true, "cell_edges": "common", "cell_basis": "within_s",
        "passes": 1}]'

Prints JSON lines: the set (release rows, R's logistic accuracy on the original, the balanced
floor from R), then per params: cells, the certificate's bounds, R kept (logistic, 3 folds,
3,000 seeded rows: a quick reading, not the gate's judges), watch kept (normalised, logistic,
3 folds, 3,000 rows), fit CPU seconds. Not the gate's families: the certificate is the figure
this measures; the gate's full judging is `mass bench realdata`.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pyarrow as pa
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]


def _logreg(x: np.ndarray, y: np.ndarray, rows: np.ndarray) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    return float(cross_val_score(LogisticRegression(max_iter=300), x[rows], y[rows], cv=3).mean())


def main(argv: list[str]) -> int:
    from generalize_table import dataset, fitted, strip_noise
    from realdata import load

    from mass.calibrate import apply
    from mass.metrics.certificate import certify
    from mass.metrics.scores import leakage_floor
    from mass.metrics.unnamed import watch_report
    from mass.noise import row_seeds
    from mass.rows import normalize_rows

    torch.set_num_threads(1)
    name, configs = argv[0], json.loads(argv[1])
    d = load(name, cache=os.path.join(os.path.dirname(HERE), "reports/realdata/cache"))
    sup, pres = ["S"], list(d.spec.r)
    train = dataset(d.X_train, {a: d.labels_train[a] for a in sup + pres})
    xt = normalize_rows(d.X_release).astype(np.float32)
    y, seeds = d.labels_release, row_seeds(pa.array(d.ids_release))
    rows = np.random.default_rng(0).permutation(len(xt))[:3000]
    r0 = {r: _logreg(xt, y[r], rows) for r in pres}
    floor = leakage_floor(y["S"], {r: y[r] for r in pres}, balanced=True, folds=5, seed=0)
    print(json.dumps({"set": name, "release": len(xt), "train": len(d.X_train),
                      "R_orig_logreg": r0, "balanced_floor_R": floor}), flush=True)  # fmt: skip
    for params in configs:
        t = time.process_time()
        xd = apply(strip_noise(fitted("ot_repair", train, sup, pres, params)), xt, seeds)
        fit_s = time.process_time() - t
        c = certify(xd, y["S"])
        w = watch_report(xt, xd, {a: y[a] for a in d.spec.watch}, {"S": y["S"]},
                         families=("logreg",), folds=3, max_rows=3000)  # fmt: skip
        print(json.dumps({
            "params": params, "cpu_fit": round(fit_s, 1), "cells": c.cells,
            "cert_bal": c.balanced, "cert_acc": c.accuracy, "plugin_bal": c.plugin_balanced,
            "reason": c.reason,
            "R_kept": {r: round(_logreg(xd, y[r], rows) / r0[r], 3) for r in pres},
            "watch": {a: None if v.get("kept") is None else round(v["kept"], 3)
                      for a, v in w.items()},
        }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
