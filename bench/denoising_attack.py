"""The public-id denoising attack on a release (issue 10, docs/threat-model.md); prints JSON.

    python bench/denoising_attack.py --release release --labels data/heldout/test \
        --attribute digit [--key-file .mass/owner.key]

For each released row it recomputes the noise the modifier added before its last
normalisation, from the row id and the release's own ``mass.modifier`` metadata (kind and
spec, so the noise scale): with the public ``row_seeds(id)`` (attacker A: all code, every
release and its ids, no key) and, given ``--key-file``, with the owner's keyed seeds
(attacker A+K). It undoes the normalisation (the ``c > 0`` with ``||c x' - a|| = 1``),
subtracts, and reports the accuracy of logistic regression retrained on the result (5-fold
CV over the labelled released rows) next to its accuracy on the release itself.
Kinds: ``mass`` (output noise), ``gaussian_noise``, and a ``chain`` ending in one of them.
"""

from __future__ import annotations

import argparse
import glob
import json

import numpy as np
import pyarrow.parquet as pq

from mass.errors import ConfigError
from mass.io import read_table
from mass.keys import read_key
from mass.noise import release_noise, release_row_seeds, row_seeds, subtract_noise


def retrained_accuracy(x: np.ndarray, y: np.ndarray, folds: int = 5) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))
    return round(float(cross_val_score(model, x, y, cv=folds).mean()), 3)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--release", required=True)
    p.add_argument("--labels", required=True, help="Parquet with the id column and labels")
    p.add_argument("--attribute", required=True)
    p.add_argument("--key-file", default=None, help="the owner key (attacker A+K)")
    p.add_argument("--id-col", default="id")
    p.add_argument("--emb-col", default="emb")
    args = p.parse_args(argv)

    rel = read_table(args.release).sort_by(args.id_col)
    meta = pq.read_schema(sorted(glob.glob(f"{args.release}/*.parquet"))[0]).metadata
    modifier = json.loads((meta or {}).get(b"mass.modifier", b"{}"))
    if not modifier:
        raise ConfigError(f"{args.release}: no mass.modifier metadata; re-export and re-run")
    labels = read_table(args.labels, columns=[args.id_col, args.attribute])
    lab = dict(zip(labels.column(args.id_col).to_pylist(),
                   labels.column(args.attribute).to_pylist(), strict=True))  # fmt: skip
    ids = rel.column(args.id_col)
    keep = np.array([i in lab for i in ids.to_pylist()])
    x = np.stack(rel.column(args.emb_col).to_numpy(zero_copy_only=False))[keep].astype(np.float64)
    ids = ids.filter(keep)
    y = np.array([lab[i] for i in ids.to_pylist()])

    def denoised(seeds: np.ndarray) -> np.ndarray:
        a = release_noise(seeds, modifier)
        if a is None:
            raise ConfigError(f"mass.modifier {modifier}: no output noise this attack can subtract")
        return subtract_noise(x, a)

    out = {
        "release": args.release,
        "attribute": args.attribute,
        "rows": int(len(y)),
        "modifier": modifier["kind"],
        "noise_key_fingerprint": (meta or {}).get(b"mass.noise_key_fingerprint", b"").decode(),
        "on_release": retrained_accuracy(x, y),
        "denoised_public_seeds": retrained_accuracy(denoised(row_seeds(ids)), y),
    }
    if args.key_file:
        seeds = release_row_seeds(ids, read_key(args.key_file), meta)
        out["denoised_with_key"] = retrained_accuracy(denoised(seeds), y)
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
