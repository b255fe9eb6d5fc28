"""What ``ot_repair``'s cells buy on the demo's features (issue 22; docs/calibration.md, "cells").

Fits ``ot_repair`` (and with ``cell_rows``) on ``data/features/train`` (`dvc repro extract`
first), releases the held-out val and test splits (``data/heldout``) in-process, each alone
and together (the 2,000 rows ``mass anonymize`` releases and audits in the demo), and judges
digit by the gate's rule
(:func:`mass.metrics.attribute_report`: four attacker families retrained on the release with
10-fold CV, their remapped twins, 95 % upper bounds, limit = max(majority, floor) + 0.05) beside
a pure-noise release (what no suppression can beat at this many rows) and the normalised
information kept of colour (preserved) and thickness (watch). No noise anywhere.

    python bench/cells.py [--cell-rows 10,20] [--by-colour] [--ranks]
        [--train data/features/train] [--heldout data/heldout]

``--by-colour`` adds the k-means cells within each colour (``cells_by_preserved``, the
candidate ``ot-repair+cells|R``), ``--ranks`` the rank cells within each colour
(``cell_axes`` 1, the candidate ``ot-repair+ranks|R``), at every ``--cell-rows``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

LABELS = ("digit", "colour", "thickness")
FAMILIES = ("logreg", "mlp", "gboost", "knn")


def judged(x: np.ndarray, xp: np.ndarray, labels: dict) -> dict:
    from mass.metrics.judges import attribute_report
    from mass.metrics.unnamed import normalised_kept

    r = attribute_report("digit", labels["digit"], x, xp, role="suppressed",
                         preserved={"colour": labels["colour"]}, folds=10,
                         families=FAMILIES, curve=False)  # fmt: skip
    out = {"digit_worst": round(r.worst, 3), "digit_bound": round(max(r.ci_high.values()), 3),
           "limit": round(r.baseline + 0.05, 3), "passed": bool(r.passed)}  # fmt: skip
    for a in ("colour", "thickness"):
        q = attribute_report(a, labels[a], x, xp, role="preserved", folds=5,
                             families=("logreg", "knn", "mlp"), curve=False)  # fmt: skip
        kept = normalised_kept(q.worst, q.original, q.majority)
        out[a] = None if kept is None else round(kept, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    from mass.io import load_embeddings
    from mass.methods import get_method
    from mass.rows import normalize_rows as unit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="data/features/train")
    ap.add_argument("--heldout", default="data/heldout")
    ap.add_argument("--cell-rows", default="10")
    ap.add_argument("--by-colour", action="store_true", help="k-means cells within each colour")
    ap.add_argument("--ranks", action="store_true", help="rank cells within each colour")
    args = ap.parse_args(argv)
    train = load_embeddings(args.train, label_cols=list(LABELS))
    where = {"val": f"{args.heldout}/val", "test": f"{args.heldout}/test",
             "val+test": args.heldout}  # fmt: skip
    splits = {s: load_embeddings(p, label_cols=list(LABELS), encodings=train.encodings)
              for s, p in where.items()}  # fmt: skip
    variants = [("ot-repair", {})]
    for c in args.cell_rows.split(","):
        variants.append((f"ot-repair+cells({c})", {"cell_rows": int(c)}))
        by_r = {"cell_rows": int(c), "cells_by_preserved": True}
        if args.by_colour:
            variants.append((f"ot-repair+cells|R({c})", by_r))
        if args.ranks:
            variants.append((f"ot-repair+ranks|R({c})", {**by_r, "cell_axes": 1}))
    for name, params in variants:
        fit = get_method("ot_repair").fit(train, suppress=["digit"], preserve=["colour"],
                                          params=params, seed=0, progress=False)  # fmt: skip
        for split, d in splits.items():
            with torch.no_grad():
                xp = fit.modifier(torch.from_numpy(unit(d.x).astype(np.float32))).numpy()
            row = {"method": name, "split": split, "cells": fit.extra.get("cells"),
                   **judged(unit(d.x), xp, d.labels)}  # fmt: skip
            print(json.dumps(row), flush=True)
    for seed in (0, 1, 2):
        for split, d in splits.items():
            noise = unit(np.random.default_rng(seed).standard_normal(d.x.shape))
            row = {"method": f"pure noise (seed {seed})", "split": split,
                   **judged(unit(d.x), noise, d.labels)}  # fmt: skip
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
