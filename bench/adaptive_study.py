"""One MaSS configuration against attackers retrained on its output (the adaptive-mode study).

Trains method "mass" on a features split, applies the modifier to train and test, retrains
logreg / MLP / kNN attackers on x'(train) and scores them on x'(test). Prints one JSON line.

    python bench/adaptive_study.py NAME '{"mode": "adaptive", ...}' SUPPRESS PRESERVE \
        [--train data/features/train] [--test data/heldout/test]

The README's "Measured privacy" table comes from this script on the DVC pipeline's features.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from mass.io import load_embeddings
from mass.methods import get_method
from mass.metrics import majority_rate, retrained_attackers
from mass.noise import row_seeds
from mass.rows import normalize_rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("params", help="JSON of the train: parameters")
    ap.add_argument("suppress")
    ap.add_argument("preserve")
    ap.add_argument("--train", default="data/features/train")
    ap.add_argument("--test", default="data/heldout/test")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    attrs = [args.suppress, args.preserve]
    tr = load_embeddings(args.train, label_cols=attrs)
    te = load_embeddings(args.test, label_cols=attrs, encodings=tr.encodings)
    t0 = time.time()
    res = get_method("mass").fit(
        tr, suppress=[args.suppress], preserve=[args.preserve],
        params=json.loads(args.params), progress=False,
    )  # fmt: skip
    fit_s = time.time() - t0
    model = res.modifier.eval()

    def modify(ds):
        with torch.no_grad():
            return model(
                torch.from_numpy(normalize_rows(ds.x)), torch.from_numpy(row_seeds(ds.ids))
            ).numpy()

    xtr, xte = modify(tr), modify(te)
    out: dict = {"name": args.name, "fit_s": round(fit_s, 1)}
    for a in attrs:
        orig = retrained_attackers(tr.x, tr.labels[a], te.x, te.labels[a], families=("logreg",))
        mod = retrained_attackers(
            xtr, tr.labels[a], xte, te.labels[a], families=("logreg", "mlp", "knn")
        )
        out[a] = {
            "majority": round(majority_rate(te.labels[a]), 3),
            "original_logreg": round(orig["logreg"], 3),
            **{k: round(v, 3) for k, v in mod.items()},
        }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
