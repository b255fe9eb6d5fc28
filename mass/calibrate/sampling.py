"""Rows for calibration: strata, stratified splits and folds, and the bounded-memory sample.

:func:`sample_table` is the reusable primitive: a seeded stratified sample of about
``max_rows`` rows of any Parquet input, read in streaming passes (pyarrow ``iter_batches``), so
memory is the sample plus one batch whatever the input size. ``mass train`` uses it above
``--max-rows`` (:func:`load_training`); an audit can use it the same way on a release joined
to its labels (strata = the label columns).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from mass.errors import InputError
from mass.io import EmbeddingDataset

log = logging.getLogger(__name__)


def stratified_split(
    strata: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(rest, held) row indices: ``fraction`` of every stratum held out (>= 1 row of a stratum
    with >= 2 rows, none of a singleton), seeded."""
    rng = np.random.default_rng(seed)
    held = []
    for c in np.unique(strata):
        rows = np.flatnonzero(strata == c)
        if len(rows) < 2:
            continue
        k = min(len(rows) - 1, max(1, int(round(fraction * len(rows)))))
        held.append(rng.permutation(rows)[:k])
    held_idx = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
    mask = np.ones(len(strata), dtype=bool)
    mask[held_idx] = False
    return np.flatnonzero(mask), held_idx


def holdout_codes(joint: np.ndarray, fraction: float) -> np.ndarray:
    """Strata of a ``fraction`` hold-out under the rare-class rule (mass.metrics.strata): a
    hold-out of f is one fold of round(1/f), so cells with fewer rows share a stratum."""
    from mass.metrics.strata import stratification_codes

    return stratification_codes(joint, max(2, int(round(1.0 / max(fraction, 1e-9)))))


def fold_indices(strata: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    """``k`` disjoint row sets covering every row, each stratum dealt round-robin (seeded)."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(strata), dtype=np.int64)
    offset = 0
    for c in np.unique(strata):
        rows = rng.permutation(np.flatnonzero(strata == c))
        fold[rows] = (np.arange(len(rows)) + offset) % k
        offset += len(rows)
    return [np.flatnonzero(fold == j) for j in range(k)]


def fold_pairs(folds: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(the other folds' rows, sorted; this fold's rows) for each of ``folds``: a model
    fitted on the first releases the second, never a row it was fitted on."""
    return [(np.sort(np.concatenate([f for j, f in enumerate(folds) if j != i])), rows)
            for i, rows in enumerate(folds)]  # fmt: skip


def total_rows(spec: str) -> int:
    """Rows of a Parquet file/dir/glob from the footers (nothing else is read); -1 when a
    footer cannot be read (the loader then names the file and the problem)."""
    import pyarrow.parquet as pq

    from mass import fs
    from mass.io import expand_paths

    n = 0
    for path in expand_paths(spec):
        try:
            with fs.open_input(path) as f:  # local or object store
                n += pq.ParquetFile(f).metadata.num_rows
        except Exception:
            return -1
    return n


def sample_table(
    spec: str,
    *,
    columns: list[str],
    strata_cols: list[str],
    max_rows: int,
    seed: int,
    batch_rows: int = 65536,
):
    """(pyarrow Table of ``columns``, note): a seeded stratified sample of about ``max_rows``
    rows of the Parquet file/dir/glob ``spec``, read in streaming passes.

    Passes 1 and 2 read ``strata_cols`` batch by batch: their classes, then the count of
    every stratum (combination of values; a null value is refused, naming the file and
    column); pass 3 reads ``columns`` and keeps a row of stratum k with probability quota_k / count_k (quota proportional, at
    least 2 rows per stratum where it has them), the uniforms drawn from one seeded generator
    in file order. Memory is the sample plus one batch; no per-row Python objects. With no
    strata column the sample is uniform. ``note``: input and sampled rows, the
    seed and ``classes`` (every value of each strata column in the input, sorted).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mass import fs
    from mass.io import common_schema, conform, expand_paths, parquet_batches, schema_of

    paths = expand_paths(spec)
    schemas = [schema_of(p) for p in paths]

    def batches(cols):
        # parts that differ only in a column's encoding read as values (mass.io.common_schema)
        target = common_schema(spec, paths, schemas, cols)
        for path in paths:
            for batch in parquet_batches(path, columns=cols, batch_rows=batch_rows):
                yield path, conform(batch, target)  # local or object store, bounded memory

    classes: dict[str, set] = {c: set() for c in strata_cols}
    for path, batch in batches(strata_cols):
        for c in strata_cols:
            col = batch.column(c)
            if col.null_count:
                raise InputError(f"{path}: column '{c}' has a null value; fill or drop it")
            classes[c].update(pc.unique(col).to_pylist())
    value_sets = {c: pa.array(sorted(classes[c])) for c in strata_cols}

    def codes(batch) -> np.ndarray:
        code = np.zeros(batch.num_rows, dtype=np.int64)
        for c in strata_cols:
            idx = pc.index_in(batch.column(c), value_set=value_sets[c]).to_numpy(
                zero_copy_only=False
            )
            code = code * len(value_sets[c]) + idx.astype(np.int64)
        return code

    counts: dict[int, int] = {}
    n = 0
    for _path, batch in batches(strata_cols or columns[:1]):
        u, cnt = np.unique(codes(batch), return_counts=True)
        for k, v in zip(u.tolist(), cnt.tolist(), strict=True):  # one entry per stratum
            counts[k] = counts.get(k, 0) + v
        n += batch.num_rows
    if n == 0:
        raise InputError(f"{spec}: no rows to sample")
    known = np.array(sorted(counts), dtype=np.int64)
    cnt = np.array([counts[k] for k in known.tolist()], dtype=np.float64)
    rates = np.minimum(1.0, np.maximum(np.minimum(cnt, 2), cnt * max_rows / n) / cnt)
    rng = np.random.default_rng(seed)
    kept = []
    for _path, batch in batches(list(dict.fromkeys([*columns, *strata_cols]))):
        keep = rng.random(batch.num_rows) < rates[np.searchsorted(known, codes(batch))]
        if keep.any():
            kept.append(pa.Table.from_batches([batch]).filter(pa.array(keep)).select(columns))
    if kept:
        table = pa.concat_tables(kept)
    else:
        with fs.open_input(paths[0]) as f:
            table = pq.read_schema(f).empty_table().select(columns)
    note = {"input_rows": n, "sampled_rows": table.num_rows, "max_rows": max_rows,
            "seed": seed, "strata": list(strata_cols),
            "how": "seeded stratified sample over the combinations of "
                   f"{list(strata_cols)}, streaming passes (pyarrow iter_batches)",
            "classes": {c: v.to_pylist() for c, v in value_sets.items()}}  # fmt: skip
    return table, note


def stream_sample(
    spec: str,
    *,
    id_col: str,
    emb_col: str,
    label_cols: list[str],
    max_rows: int,
    seed: int,
    batch_rows: int = 65536,
) -> tuple[EmbeddingDataset, dict[str, Any]]:
    """:func:`sample_table` of (ids, embeddings, labels), stratified on the labels, as an
    EmbeddingDataset; ids are checked for duplicates within the sample only."""
    from mass.io import LabelEncoding, check_ids, embedding_matrix

    table, note = sample_table(spec, columns=[id_col, emb_col, *label_cols],
                               strata_cols=list(label_cols), max_rows=max_rows, seed=seed,
                               batch_rows=batch_rows)  # fmt: skip
    classes = note.pop("classes")  # every class of the input, sampled or not
    encs = {c: LabelEncoding(c, tuple(classes[c])) for c in label_cols}
    ids = check_ids(table, id_col, source=spec)
    x = embedding_matrix(table, emb_col, source=spec)
    labels = {c: encs[c].encode(table.column(c).combine_chunks(), source=spec) for c in label_cols}
    note["how"] += "; ids checked for duplicates within the sample only"
    return EmbeddingDataset(ids=ids, x=x, labels=labels, encodings=encs, source=spec), note


def load_training(
    spec: str, *, id_col: str, emb_col: str, label_cols: list[str], max_rows: int, seed: int
) -> tuple[EmbeddingDataset, dict[str, Any] | None]:
    """The training rows: all of them, or above ``max_rows`` a streamed stratified sample."""
    from mass.io import load_embeddings

    n = total_rows(spec)
    if n > max_rows:
        log.info("%s: %d rows > --max-rows %d: training on a stratified sample", spec, n, max_rows)
        return stream_sample(spec, id_col=id_col, emb_col=emb_col, label_cols=label_cols,
                             max_rows=max_rows, seed=seed)  # fmt: skip
    ds = load_embeddings(spec, id_col=id_col, emb_col=emb_col, label_cols=label_cols)
    return ds, None
