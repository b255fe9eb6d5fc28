"""The public-id denoising attack on a release (issue 10, docs/threat-model.md); prints JSON.

    python bench/denoising_attack.py --release release --labels data/features/test \
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
import torch

from mass.errors import ConfigError
from mass.io import read_table
from mass.keys import read_key
from mass.noise import release_row_seeds, row_noise, row_seeds


def final_noise(seeds: np.ndarray, modifier: dict) -> np.ndarray:
    """The vector ``a`` the modifier adds before its last normalisation, per row."""
    kind, spec = modifier.get("kind"), modifier.get("spec", {})
    if kind == "chain":
        return final_noise(seeds, spec["parts"][-1])
    s = torch.from_numpy(np.asarray(seeds, dtype=np.int64))
    if kind == "mass" and float(spec.get("output_noise", 0)) > 0:
        z = row_noise(s + 0x5EED, int(spec["dim"])).numpy().astype(np.float64)
        return float(spec["output_noise"]) * z / int(spec["dim"]) ** 0.5
    if kind == "gaussian_noise":
        return float(spec["sigma"]) * row_noise(s, int(spec["dim"])).numpy().astype(np.float64)
    raise ConfigError(
        f"mass.modifier {kind!r} (spec {spec}) adds no output noise this attack can subtract"
    )


def denoise(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    xa = (x * a).sum(1, keepdims=True)
    c = xa + np.sqrt(np.maximum(xa**2 - (a * a).sum(1, keepdims=True) + 1.0, 0.0))
    return c * x - a


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
    out = {
        "release": args.release,
        "attribute": args.attribute,
        "rows": int(len(y)),
        "modifier": modifier["kind"],
        "noise_key_fingerprint": (meta or {}).get(b"mass.noise_key_fingerprint", b"").decode(),
        "on_release": retrained_accuracy(x, y),
        "denoised_public_seeds": retrained_accuracy(
            denoise(x, final_noise(row_seeds(ids), modifier)), y
        ),
    }
    if args.key_file:
        seeds = release_row_seeds(ids, read_key(args.key_file), meta)
        out["denoised_with_key"] = retrained_accuracy(denoise(x, final_noise(seeds, modifier)), y)
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
