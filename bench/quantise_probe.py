"""A probe, not a method: scalar quantisation of the continuous OT repair along within-S
axes (common edges).

python bench/quantise_probe.py SET '[{"levels": 3, "axes": 0, "basis": "within_s"}, ...]' [--max-rows N]
axes 0 = all. Each config: the continuous ot_repair (default knobs, fitted once) applied to
train and release rows; train's repaired rows give axes (within-S covariance, or identity)
and per-axis quantile edges common to every S class; release = mean + sum_a centre_a(bin_a)
axis_a. Judged as bench/realdata_cells.py judges (quick readings). Measured once (session 17,
docs/journal/cells-2026-11-28.md): on the frontier k-means cells already reach, no better.
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
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]


def axes_of(z, s, basis):
    if basis == "identity":
        return np.eye(z.shape[1])
    c = z.copy()
    for k in np.unique(s):
        c[s == k] -= c[s == k].mean(axis=0)
    if basis == "pca":
        c = z - z.mean(axis=0)
    return np.linalg.svd(c, full_matrices=False)[2]


def quantise(zt, st, zr, levels, m, basis, by_group=None):
    a = axes_of(zt, st, basis)
    a = a[:m] if m else a
    mu = zt.mean(axis=0)
    tt, tr = (zt - mu) @ a.T, (zr - mu) @ a.T
    out = np.zeros_like(tr)
    for j in range(tt.shape[1]):
        edges = np.unique(np.quantile(tt[:, j], np.linspace(0, 1, levels + 1)[1:-1]))
        bt, br = np.searchsorted(edges, tt[:, j]), np.searchsorted(edges, tr[:, j])
        cent = np.array(
            [tt[bt == b, j].mean() if (bt == b).any() else 0.0 for b in range(len(edges) + 1)]
        )
        out[:, j] = cent[br]
    return mu + out @ a


def main(argv):
    from generalize_table import dataset, fitted, strip_noise
    from realdata import load
    from realdata_cells import _logreg, _s_retrained
    from realdata_run import lookup_judge

    from mass.audit.policy import load_policy
    from mass.calibrate import apply
    from mass.metrics.unnamed import watch_report
    from mass.noise import row_seeds
    from mass.rows import normalize_rows

    torch.set_num_threads(1)
    max_rows = int(argv[argv.index("--max-rows") + 1]) if "--max-rows" in argv else None
    name, configs = argv[0], json.loads(argv[1])
    d = load(name, max_rows=max_rows, cache=os.path.join(ROOT, "reports/realdata/cache"))
    sup, pres = ["S"], list(d.spec.r)
    train = dataset(d.X_train, {a: d.labels_train[a] for a in sup + pres})
    xt = normalize_rows(d.X_release).astype(np.float32)
    xtr = normalize_rows(d.X_train).astype(np.float32)
    y = d.labels_release
    rows = np.random.default_rng(0).permutation(len(xt))[:3000]
    r0 = {r: _logreg(xt, y[r], rows) for r in pres}
    policy = load_policy(os.path.join(ROOT, "params.yaml"))
    t = time.process_time()
    mod = strip_noise(fitted("ot_repair", train, sup, pres, {}))
    zr = apply(mod, xt, row_seeds(pa.array(d.ids_release)))
    zt = apply(mod, xtr, row_seeds(pa.array(d.ids_train)))
    print(
        json.dumps({"set": name, "release": len(xt), "fit_cpu": round(time.process_time() - t)}),
        flush=True,
    )
    st = np.asarray(d.labels_train["S"])
    for cfg in configs:
        if cfg.get("continuous"):
            xd = zr
        else:
            xd = quantise(
                zt, st, zr, cfg["levels"], cfg.get("axes", 0), cfg.get("basis", "within_s")
            )
        xd = xd.astype(np.float32)
        look = lookup_judge(xd, y["S"], policy, {r: y[r] for r in pres})
        w = watch_report(
            xt,
            xd,
            {a: y[a] for a in d.spec.watch},
            {"S": y["S"]},
            families=("logreg",),
            folds=3,
            max_rows=3000,
        )
        print(
            json.dumps(
                {
                    "cfg": cfg,
                    "distinct": int(len(np.unique(xd, axis=0))),
                    "lookup": {k: v for k, v in look.items() if k != "rows"},
                    "S_retrained_bal": _s_retrained(xd, y["S"], rows),
                    "R_kept": {r: round(_logreg(xd, y[r], rows) / r0[r], 3) for r in pres},
                    "watch": {
                        a: None if v.get("kept") is None else round(v["kept"], 3)
                        for a, v in w.items()
                    },
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
