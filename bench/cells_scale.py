"""Does a cell release leak more as it grows? One fitted ``ot_repair`` model, fresh rows of
the same distribution released at several sizes (issue 35, items 1 and 3; docs/calibration.md,
"one partition").

Synthetic rows with a known S-correlated structure (:func:`scale_case`: binary s moves one
axis's offset and width and picks styles; r kept; two watch attributes u, v that live within
the s classes and are independent of s). Each candidate of the cell family is fitted once on
``--fit`` rows, then releases fresh rows at each ``--sizes``; on every release:

- ``lookup``: the per-released-vector attacker (majority s per distinct vector, learned on one
  half of the release, scored on the other, both ways); the Bayes rule of a cell release.
- ``retrained``: the best of the audit's retrained attacker families
  (:func:`mass.metrics.attackers.retrained_attackers`, 5-fold CV on the release).
- r, u, v kept: normalised information, (acc - majority) / (orig - majority), best of logreg
  and kNN on half / half, against the same on the original rows.

    python bench/cells_scale.py [--fit 6000] [--sizes 2000,10000,50000] [--out FILE.json]
        [--set labsup --max-rows 12000] [--only "NAME;NAME"]

``--set``: a real set of bench/realdata.py (issue 34) instead: fitted on its training rows
(``--max-rows`` caps the loaded set; 70 % of it), released from the rows it was not fitted on
(its release split and the fresh rows beyond the cap) at each size that many rows allow; r is
its first named R, the watch attributes its watch list.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pyarrow as pa
import torch

DIM = 24
CANDIDATES = {
    "ranks|R class edges (old default)": {"cell_rows": 10, "cell_axes": 1,
                                          "cells_by_preserved": True},
    "ranks|R class edges, passes 2": {"cell_rows": 10, "cell_axes": 1, "passes": 2,
                                      "cells_by_preserved": True},
    "ranks|R common": {"cell_rows": 10, "cell_axes": 1, "cells_by_preserved": True,
                       "cell_edges": "common"},
    "ranks|R common within_s": {"cell_rows": 10, "cell_axes": 1, "cells_by_preserved": True,
                                "cell_edges": "common", "cell_basis": "within_s"},
    "ranks|R common within_s 2 axes": {"cell_rows": 10, "cell_axes": 2,
                                       "cells_by_preserved": True, "cell_edges": "common",
                                       "cell_basis": "within_s"},
    "partition|R (common within_s, passes 2)": {"cell_rows": 10, "cell_axes": 1, "passes": 2,
                                               "cells_by_preserved": True,
                                               "cell_edges": "common", "cell_basis": "within_s"},
    "partition2|R (2 axes, passes 2)": {"cell_rows": 10, "cell_axes": 2, "passes": 2,
                                       "cells_by_preserved": True, "cell_edges": "common",
                                       "cell_basis": "within_s"},
    "balanced|R (partition|R, cell_balance 0.3)": {"cell_rows": 10, "cell_axes": 1,
                                                   "passes": 2, "cells_by_preserved": True,
                                                   "cell_edges": "common",
                                                   "cell_basis": "within_s",
                                                   "cell_balance": 0.3},
    "balanced2|R (partition2|R, cell_balance 0.3)": {"cell_rows": 10, "cell_axes": 2,
                                                     "passes": 2, "cells_by_preserved": True,
                                                     "cell_edges": "common",
                                                     "cell_basis": "within_s",
                                                     "cell_balance": 0.3},
    "k-means cells|R": {"cell_rows": 10, "cells_by_preserved": True},
    "k-means cells|R, passes 2": {"cell_rows": 10, "cells_by_preserved": True, "passes": 2},
}  # fmt: skip


def scale_case(n: int, seed: int, structure_seed: int = 0):
    """``n`` rows: s (binary, 0.5) moves x1's offset and width and re-weights 12 styles
    (x4..); r (binary) is x0; u is the tertile of w (x1 = the row's rank within s), v the
    tertile of q (x3, independent of s and r): what a release keeps within the s classes."""
    from mass.io import EmbeddingDataset, LabelEncoding

    srng = np.random.default_rng(structure_seed)
    styles, mix = srng.normal(size=(12, DIM - 4)), srng.dirichlet(np.full(12, 0.3), size=2)
    rng = np.random.default_rng(seed)
    s, r = rng.integers(0, 2, n), rng.integers(0, 2, n)
    w, q = rng.normal(size=n), rng.normal(size=n)
    style = (rng.random(n)[:, None] > np.cumsum(mix[s], axis=1)).sum(axis=1).clip(0, 11)
    x = np.zeros((n, DIM))
    x[:, 0], x[:, 1], x[:, 2] = 4.0 * (2 * r - 1), (0.6 + 0.3 * s) * 4.0 * w + 0.8 * s, 10.0
    x[:, 3] = 2.0 * q
    x[:, 4:] = 1.5 * styles[style] + rng.normal(scale=0.3, size=(n, DIM - 4))
    tert = np.array([-0.4307, 0.4307])  # N(0, 1) tertiles
    labels = {"s": s, "r": r, "u": np.digitize(w, tert), "v": np.digitize(q, tert)}
    enc = {k: LabelEncoding(k, tuple(range(3 if k in "uv" else 2))) for k in labels}
    return EmbeddingDataset(ids=pa.array(np.arange(n, dtype=np.int64)), x=x.astype(np.float32),
                            labels={k: v.astype(np.int64) for k, v in labels.items()},
                            encodings=enc, source="scale_case")  # fmt: skip


def _dataset(x: np.ndarray, labels: dict[str, np.ndarray]):
    from mass.io import EmbeddingDataset, LabelEncoding

    labels = {k: np.unique(v, return_inverse=True)[1].astype(np.int64) for k, v in labels.items()}
    enc = {k: LabelEncoding(k, tuple(range(int(v.max()) + 1))) for k, v in labels.items()}
    return EmbeddingDataset(ids=pa.array(np.arange(len(x), dtype=np.int64)),
                            x=x.astype(np.float32), labels=labels, encodings=enc,
                            source="realdata")  # fmt: skip


def real_case(name: str, max_rows: int, sizes: list[int]):
    """(fit rows, {size: fresh rows}, watch names) of a bench/realdata.py set; labels renamed
    s (its S), r (its first R) and the watch attributes by name."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from realdata import load  # bench/realdata.py (issue 34)

    d = load(name, max_rows=max_rows)
    keys = {"s": "S", "r": d.spec.r[0], **{w: w for w in d.spec.watch}}
    fit = _dataset(d.X_train, {k: d.labels_train[v] for k, v in keys.items()})
    pool_x = np.vstack([d.X_release, d.X_fresh])
    pool = {k: np.r_[d.labels_release[v], d.labels_fresh[v]] for k, v in keys.items()}
    order = np.random.default_rng(0).permutation(len(pool_x))
    fresh = {n: _dataset(pool_x[order[:n]], {k: v[order[:n]] for k, v in pool.items()})
             for n in sizes if n <= len(pool_x)}  # fmt: skip
    if len(pool_x) not in fresh and len(pool_x) > max(fresh, default=0):
        fresh[len(pool_x)] = _dataset(pool_x[order], {k: v[order] for k, v in pool.items()})
    return fit, fresh, list(d.spec.watch)


def lookup_attack(rel: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    """Majority label per distinct released vector, learned on one half, scored on the
    other (both ways); an unseen vector gets the learning half's majority."""
    _, code = np.unique(rel.round(6), axis=0, return_inverse=True)
    code = code.ravel()
    half = np.zeros(len(y), dtype=bool)
    half[np.random.default_rng(seed).permutation(len(y))[: len(y) // 2]] = True
    k, correct = int(y.max()) + 1, 0
    for test in (half, ~half):
        counts = np.zeros((int(code.max()) + 1, k))
        np.add.at(counts, (code[~test], y[~test]), 1)
        fallback = np.bincount(y[~test], minlength=k).argmax()
        table = np.where(counts.sum(1) > 0, counts.argmax(1), fallback)
        correct += int((table[code[test]] == y[test]).sum())
    return correct / len(y)


def half_half(x: np.ndarray, y: np.ndarray) -> float:
    from mass.metrics.attackers import retrained_attackers

    a = np.arange(len(y)) % 2 == 0
    got = retrained_attackers(x[a], y[a], x[~a], y[~a], families=("logreg", "knn"))
    return max(got.values())


def judged(ds, rel: np.ndarray, retrained: bool, watch=("u", "v")) -> dict:
    from mass.metrics.attackers import retrained_attackers

    s = ds.labels["s"]
    out = {"rows": len(s), "distinct": int(len(np.unique(rel.round(6), axis=0))),
           "majority_s": round(float(np.bincount(s).max() / len(s)), 4),
           "lookup_s": round(lookup_attack(rel, s), 4)}  # fmt: skip
    if retrained:
        got = retrained_attackers(rel, s, folds=5)
        out["retrained_s"] = {k: round(v, 4) for k, v in got.items()}
    for a in ("r", *watch):
        y = ds.labels[a]
        maj = float(np.bincount(y).max() / len(y))
        gain = half_half(ds.x, y) - maj  # nothing learnable below 0.02 (mass.metrics.unnamed)
        out[f"{a}_kept"] = round((half_half(rel, y) - maj) / gain, 3) if gain >= 0.02 else None
    return out


@torch.no_grad()
def release(modifier, x: np.ndarray) -> np.ndarray:
    """The fitted modifier's output for rows ``x`` (deterministic: no seeds drawn)."""
    return modifier.eval()(torch.as_tensor(x)).numpy()


def main(argv: list[str] | None = None) -> int:
    from mass.methods import get_method

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", type=int, default=6000)
    ap.add_argument("--sizes", default="2000,10000,50000")
    ap.add_argument(
        "--retrained-up-to",
        type=int,
        default=10000,
        help="run the retrained attackers on releases up to this many rows",
    )
    ap.add_argument("--only", default="", help="candidate names separated by ;")
    ap.add_argument("--out", default="")
    ap.add_argument("--set", default="", help="a bench/realdata.py set instead of synthetic")
    ap.add_argument("--max-rows", type=int, default=12000)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sizes = [int(v) for v in args.sizes.split(",")]
    if args.set:
        fit_ds, fresh, watch = real_case(args.set, args.max_rows, sizes)
    else:
        fit_ds, watch = scale_case(args.fit, seed=1), ["u", "v"]
        fresh = {n: scale_case(n, seed=100 + i) for i, n in enumerate(sizes)}
    names = [c for c in CANDIDATES if not args.only or c in args.only.split(";")]
    results = {}
    for name in names:
        t0 = time.time()
        fit = get_method("ot_repair").fit(fit_ds, suppress=["s"], preserve=["r"], seed=0,
                                          progress=False, params=CANDIDATES[name])  # fmt: skip
        rows = {
            "cells_fit": fit.extra.get("cells"),
            "rows_per_cell": fit.extra.get("rows_per_cell"),
            **{k: fit.extra[k] for k in ("clusters", "held_rows_per_cluster") if k in fit.extra},
            "fit_s": round(time.time() - t0, 1),
        }
        for n, ds in fresh.items():
            rel = release(fit.modifier, ds.x)
            rows[str(n)] = judged(ds, rel, n <= args.retrained_up_to, watch)
        results[name] = rows
        print(json.dumps({name: rows}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"fit": len(fit_ds), "set": args.set or "scale_case", "sizes": sorted(fresh),
                       "results": results}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
