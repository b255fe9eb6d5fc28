"""Cell resolution against the certificate on one realdata set: each ``ot_repair`` params
dict fitted on the set's training rows, its release of the release rows (key stripped)
certified (mass.metrics.certificate), R and the watch attributes read by one quick family.

    python bench/realdata_cells.py names '[{"cell_rows": 10, "cell_count": 98, "cell_axes": 2,
        "cells_by_preserved": true, "cell_edges": "common", "cell_basis": "within_s",
        "passes": 1}]'

``"cell_count": "certified"`` (or ``"certified*2"``, any factor) stands for what
calibration's certified candidates get: :func:`mass.calibrate.space.certified_cell_count`
for the release rows and params.yaml's policy (times the factor). ``--max-rows N`` cuts the
set as `mass bench realdata --max-rows` does (text sets read their cached embeddings from
reports/realdata/cache; a link to another checkout's cache will do).

Prints JSON lines: the set (release rows, R's logistic accuracy on the original, the balanced
floor from R, the certified count), then per params: cells, the certificate's bounds, the
lookup judge (majority S per released vector, cross-validated, plain and balanced, against
the gate's baselines and margin: bench/realdata_run.py ``lookup_judge``), S read by retrained
logreg / gboost / kNN (balanced accuracy, 5 folds, 3,000 seeded rows), R kept (logistic, 3
folds, 3,000 rows), watch kept (normalised, logistic, 3 folds, 3,000 rows) with each watch
attribute's Cramér's V with S, fit CPU seconds. Quick readings, not the gate's judges: the
certificate is the figure this measures; the gate's full judging is `mass bench realdata`.

``--gate [FOLDS]`` adds, per params, the gate's own reading of the release
(``generalize_table.judge`` on every release row: params.yaml's families and margins, FOLDS
folds (default the policy's), S by every judge with the frozen reader of the training rows,
R kept, each watch attribute as the audit reads it: the lower of retrained and frozen, over
the policy's fold orders): the figures of docs/calibration.md, "Finer k-means cells".
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]


def _logreg(x: np.ndarray, y: np.ndarray, rows: np.ndarray) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    return float(cross_val_score(LogisticRegression(max_iter=300), x[rows], y[rows], cv=3).mean())


def _cell_count(params: dict, certified: int) -> dict:
    """``params`` with a ``"certified[*factor]"`` cell_count replaced by its number."""
    value = params.get("cell_count")
    if not isinstance(value, str):
        return params
    if not value.startswith("certified"):
        raise SystemExit(f"realdata_cells: cell_count {value!r}: a number or 'certified[*f]'")
    factor = float(value.partition("*")[2] or 1)
    return {**params, "cell_count": int(round(certified * factor))}


def _s_retrained(xd: np.ndarray, s: np.ndarray, rows: np.ndarray) -> dict[str, float]:
    """Balanced accuracy of S by each quick family retrained on the release (5 folds)."""
    from mass.metrics.attackers import attack_predictions
    from mass.metrics.scores import balanced_accuracy

    _, y = np.unique(s[rows], return_inverse=True)
    pred = attack_predictions(xd[rows], y, families=("logreg", "gboost", "knn"), folds=5)
    return {f: round(balanced_accuracy(y, p[1.0]), 4) for f, p in pred.items()}


@dataclass
class Probe:
    """One realdata set as the cell probes read it: the set, S and R, the training dataset,
    the unit release rows, their labels and seeds, the 3,000 seeded judging rows, R's
    logistic accuracy on the original, and params.yaml's policy."""

    d: Any
    sup: list[str]
    pres: list[str]
    train: Any
    xt: np.ndarray
    y: dict
    seeds: Any
    rows: np.ndarray
    r0: dict[str, float]
    policy: Any


def setup(argv: list[str]) -> tuple[Probe, list[dict]]:
    """(the probe of ``argv``'s set, its JSON configs): ``SET 'JSON' [--max-rows N]``."""
    from generalize_table import dataset
    from realdata import load

    from mass.audit.policy import load_policy
    from mass.noise import row_seeds
    from mass.rows import normalize_rows

    torch.set_num_threads(1)
    max_rows = int(argv[argv.index("--max-rows") + 1]) if "--max-rows" in argv else None
    name, configs = argv[0], json.loads(argv[1])
    d = load(name, max_rows=max_rows,
             cache=os.path.join(os.path.dirname(HERE), "reports/realdata/cache"))  # fmt: skip
    sup, pres = ["S"], list(d.spec.r)
    train = dataset(d.X_train, {a: d.labels_train[a] for a in sup + pres})
    xt = normalize_rows(d.X_release).astype(np.float32)
    y, seeds = d.labels_release, row_seeds(pa.array(d.ids_release))
    rows = np.random.default_rng(0).permutation(len(xt))[:3000]
    r0 = {r: _logreg(xt, y[r], rows) for r in pres}
    policy = load_policy(os.path.join(os.path.dirname(HERE), "params.yaml"))
    return Probe(d, sup, pres, train, xt, y, seeds, rows, r0, policy), configs


def judged(p: Probe, xd: np.ndarray) -> dict[str, Any]:
    """The quick readings of a release ``xd`` of the release rows: the lookup judge, S by the
    retrained families, R kept, each watch attribute kept and its Cramér's V with S."""
    from realdata_run import lookup_judge

    from mass.metrics.unnamed import watch_report

    y = p.y
    look = lookup_judge(xd, y["S"], p.policy, {r: y[r] for r in p.pres})
    w = watch_report(p.xt, xd, {a: y[a] for a in p.d.spec.watch}, {"S": y["S"]},
                     families=("logreg",), folds=3, max_rows=3000)  # fmt: skip
    return {
        "lookup": {k: v for k, v in look.items() if k != "rows"},
        "S_retrained_bal": _s_retrained(xd, y["S"], p.rows),
        "R_kept": {r: round(_logreg(xd, y[r], p.rows) / p.r0[r], 3) for r in p.pres},
        "watch": {a: None if v.get("kept") is None else round(v["kept"], 3)
                  for a, v in w.items()},
        "watch_v": {a: round(v["dependence"]["S"]["cramers_v"], 3) for a, v in w.items()},
    }  # fmt: skip


# training rows S's frozen judge is fitted on under --gate (seeded), as the benchmark's
# budgeted runs (--judge-rows 2000) fitted it
GATE_FROZEN_ROWS = 2000


def gate_reading(p: Probe, xd: np.ndarray, folds: int | None) -> dict[str, Any]:
    """The gate's reading of the release ``xd`` (module doc, ``--gate``)."""
    from dataclasses import replace

    from generalize_table import judge
    from realdata_run import frozen_s_judge

    pol = replace(p.policy, max_rows=None, folds=folds or p.policy.folds)
    frozen = frozen_s_judge(p.d, pol.seed, GATE_FROZEN_ROWS)
    row = judge(p.xt, xd, xd, p.y, p.sup, p.pres, list(p.d.spec.watch), pol, frozen)
    s = row["S"]["S"]
    return {
        "S_ok": s["ok"], "S_worst": s["worst_judge"], "S_bound": round(s["ci_high"], 4),
        "S_limit": round(s["limit"], 4),
        "balanced_highest": max(s["balanced_judges"], key=s["balanced_judges"].get),
        "balanced_bound": round(max(s["balanced_judges"].values()), 4),
        "balanced_limit": round(s["balanced_limit"], 4),
        "R_kept": {a: round(v["kept"], 3) for a, v in row["R"].items()},
        "watch": {w: {"kept": round(v["kept"], 3), "retrained": round(v["retrained_kept"], 3),
                      "frozen": (None if v.get("frozen_kept") is None
                                 else round(v["frozen_kept"], 3))}
                  for w, v in row["watch"].items() if v["kept"] is not None},
    }  # fmt: skip


def gate_folds(argv: list[str]) -> tuple[bool, int | None]:
    """(``--gate`` given, its FOLDS or None)."""
    if "--gate" not in argv:
        return False, None
    i = argv.index("--gate") + 1
    return True, int(argv[i]) if i < len(argv) and argv[i].isdigit() else None


def main(argv: list[str]) -> int:
    from generalize_table import fitted, strip_noise

    from mass.calibrate import apply
    from mass.calibrate.space import certified_cell_count
    from mass.metrics.certificate import certify
    from mass.metrics.scores import leakage_floor

    p, configs = setup(argv)
    gate, folds = gate_folds(argv)
    floor = leakage_floor(p.y["S"], {r: p.y[r] for r in p.pres}, balanced=True, folds=5, seed=0)
    certified = certified_cell_count(p.train.labels, p.sup, p.policy, len(p.xt))
    print(json.dumps({"set": argv[0], "release": len(p.xt), "train": len(p.d.X_train),
                      "R_orig_logreg": p.r0, "balanced_floor_R": floor,
                      "certified_cells": certified}), flush=True)  # fmt: skip
    for params in configs:
        params = _cell_count(params, certified)
        if params.get("cell_count", 2) < 2:  # as calibration: no two cells certify, skipped
            print(json.dumps({"params": params, "skipped": "certifies no two cells"}))
            continue
        t = time.process_time()
        xd = apply(strip_noise(fitted("ot_repair", p.train, p.sup, p.pres, params)), p.xt,
                   p.seeds)  # fmt: skip
        fit_s = time.process_time() - t
        c = certify(xd, p.y["S"])
        print(json.dumps({
            "params": params, "cpu_fit": round(fit_s, 1), "cells": c.cells,
            "cert_bal": c.balanced, "cert_acc": c.accuracy, "plugin_bal": c.plugin_balanced,
            "reason": c.reason, **judged(p, xd),
            **({"gate": gate_reading(p, xd, folds)} if gate else {}),
        }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
