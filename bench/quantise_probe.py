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
    from generalize_table import fitted, strip_noise
    from realdata_cells import judged, setup

    from mass.calibrate import apply
    from mass.noise import row_seeds
    from mass.rows import normalize_rows

    p, configs = setup(argv)
    d = p.d
    xtr = normalize_rows(d.X_train).astype(np.float32)
    t = time.process_time()
    mod = strip_noise(fitted("ot_repair", p.train, p.sup, p.pres, {}))
    zr = apply(mod, p.xt, p.seeds)
    zt = apply(mod, xtr, row_seeds(pa.array(d.ids_train)))
    print(
        json.dumps(
            {"set": argv[0], "release": len(p.xt), "fit_cpu": round(time.process_time() - t)}
        ),
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
        out = {"cfg": cfg, "distinct": int(len(np.unique(xd, axis=0))), **judged(p, xd)}
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
