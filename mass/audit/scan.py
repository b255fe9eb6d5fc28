"""The audit's one pass over the whole release, in bounded memory (:mod:`mass.audit.stream`).

Per id-hash partition: ids unique and known (joined with the labels and ``--input`` by id),
every value finite, the norm, and the bypass cosine against the original embedding; each
partition's row frame goes to the GX validator at once. The attackers' rows are a seeded
sample of the audited rows of at most ``policy.max_rows`` (the smallest keyed hashes of the
ids, so the sample does not depend on the partitioning), in that key's order (so neither
does the attackers' fold split: the same rows sharded otherwise get the same numbers); with fewer audited
rows it is all of them, exactly as before the audit streamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from mass.audit.data import LabelStats, positions
from mass.audit.stream import (
    PARTITION_ROWS,
    ROW,
    Scratch,
    check_unique,
    footer_rows,
    partition,
)
from mass.embeddings import embedding_matrix, release_matrix
from mass.errors import InputError, SchemaError
from mass.io import LabelEncoding, expand_paths, schema_of
from mass.noise import row_seeds
from mass.rows import normalize_rows

SAMPLE_SALT = 0x5A3D1E  # mixes the policy seed into the sample's id hash


@dataclass
class Scan:
    metadata: dict[str, str]
    columns: list[tuple[str, str]]
    encodings: dict[str, LabelEncoding]
    counts: dict[str, int | None]
    n_labels: int
    n_input: int | None
    n_parts: int
    label_columns: list[str] = field(default_factory=list)  # besides id and embedding
    # the attackers' sample (release order)
    ids: pa.Array | None = None
    x: np.ndarray | None = None  # originals, unit norm
    xp: np.ndarray | None = None  # released
    y: dict[str, np.ndarray] = field(default_factory=dict)
    extra: dict[str, pa.Array] = field(default_factory=dict)


def _sample_keys(ids: pa.Array, seed: int) -> np.ndarray:
    return row_seeds(np.bitwise_xor(row_seeds(ids), np.int64(SAMPLE_SALT + seed)))


def scan(req, rows_sink, *, attrs: list[str], encodings: dict | None) -> Scan:
    """Stream ``req``'s release, labels and input; ``rows_sink(i, n_parts, frame)`` validates."""
    id_col, emb_col, pol = req.id_col, req.emb_col, req.policy
    rel_schema = schema_of(expand_paths(req.release)[0])
    lab_schema = schema_of(expand_paths(req.labels)[0])
    metadata = {k.decode(): v.decode(errors="replace")
                for k, v in (rel_schema.metadata or {}).items() if k.startswith(b"mass.")}  # fmt: skip
    lab_has_x = _check_columns(req, rel_schema.names, lab_schema.names, attrs)
    n_max = max(footer_rows(expand_paths(req.release)), footer_rows(expand_paths(req.labels)),
                footer_rows(expand_paths(req.input)) if req.input else 0)  # fmt: skip
    stats = LabelStats(req.labels, attrs, encodings)
    kept: dict[str, list] = {"key": [], "row": [], "ids": [], "x": [], "xp": [], "y": [],
                             "extra": []}  # fmt: skip
    cap = pol.max_rows
    counts = dict.fromkeys(("matched", "nonfinite", "audited"), 0)
    with Scratch(n_max, getattr(req, "partition_rows", PARTITION_ROWS)) as sc:
        kw = dict(id_col=id_col, n_parts=sc.n_parts, scratch=sc.path)
        rel = partition(req.release, rel_schema.names, tag="release", **kw)
        lab = partition(req.labels, [id_col, *attrs, *([emb_col] if lab_has_x else [])],
                        tag="labels", on_batch=stats, **kw)  # fmt: skip
        encs = stats.encodings()
        inp = partition(req.input, [id_col, emb_col], tag="input", **kw) if req.input else None
        extra_cols = [c for c in rel_schema.names if c not in (id_col, emb_col)]
        for i in range(sc.n_parts):
            R, L = rel.part(i), lab.part(i)
            part = _read_part(req, R, L, inp, i, lab_has_x)
            rows, finite, both = _row_checks(part)
            if req.near is not None:  # `mass audit --model`: recompute them
                at = np.flatnonzero(both & (rows["cosine"].to_numpy() >= pol.max_cosine))
                req.near.add(part.ids.take(pa.array(at)), part.x[at], part.xr[at])
            rows_sink(i, sc.n_parts, rows)
            use = (part.pos >= 0) & both
            counts["matched"] += int((part.pos >= 0).sum())
            counts["nonfinite"] += int((~finite).sum())
            counts["audited"] += int(use.sum())
            if use.any():
                codes = [encs[a].encode(L.column(a).combine_chunks(), source=req.labels)
                         for a in attrs]  # fmt: skip
                _keep_sample(kept, part, use, codes, R.select(extra_cols), pol.seed, cap)
        n_rel, n_lab = rel.n_rows, lab.n_rows
        n_in = inp.n_rows if inp is not None else None
    out = Scan(metadata=metadata, columns=[(f.name, str(f.type)) for f in rel_schema],
               label_columns=[c for c in lab_schema.names if c not in (id_col, emb_col)],
               encodings=encs, n_labels=n_lab, n_input=n_in, n_parts=sc.n_parts,
               counts={"release": n_rel, "labels": n_lab, "input": n_in, **counts})  # fmt: skip
    if kept["key"]:
        _set_sample(out, kept, cap, attrs, extra_cols)
    return out


def _check_columns(req, rel_names: list[str], lab_names: list[str], attrs: list[str]) -> bool:
    """Refuse a release without the embedding column or labels without an attribute; whether
    the labels carry the original embeddings (else ``--input`` must)."""
    emb_col = req.emb_col
    if emb_col not in rel_names:
        raise SchemaError(f"{req.release}: no embedding column '{emb_col}' (columns: "
                          f"{rel_names}); pass --emb-col")  # fmt: skip
    for attr in attrs:
        if attr not in lab_names:
            raise SchemaError(f"{req.labels}: no label column '{attr}' (columns: "
                              f"{lab_names}); check --suppress/--preserve")  # fmt: skip
    lab_has_x = emb_col in lab_names
    if not lab_has_x and not req.input:
        raise InputError(
            f"{req.labels}: no '{emb_col}' column with the original embeddings; the audit "
            "needs them for the original accuracy: use the held-out features split or --input"
        )
    return lab_has_x


@dataclass(frozen=True)
class _Part:
    """One partition's release rows, joined by id with the labels and the originals."""

    ids: pa.Array  # release ids
    rows: np.ndarray  # their row numbers in the release
    xr: np.ndarray  # released embeddings
    x: np.ndarray  # originals, unit norm; NaN where the id has none
    pos: np.ndarray  # each release row's label row (-1: none)
    in_pos: np.ndarray | None  # each release row's --input row (-1: none); None: no --input


def _read_part(req, R: pa.Table, L: pa.Table, inp, i: int, lab_has_x: bool) -> _Part:
    """Partition ``i``: ids unique in each source, the release joined with its originals."""
    id_col, emb_col = req.id_col, req.emb_col
    r_ids, l_ids = R.column(id_col).combine_chunks(), L.column(id_col).combine_chunks()
    r_rows = R.column(ROW).to_numpy()
    check_unique(r_ids, r_rows, id_col=id_col, source=req.release)
    check_unique(l_ids, L.column(ROW).to_numpy(), id_col=id_col, source=req.labels)
    xr = release_matrix(R, emb_col, source=req.release)
    pos = positions(r_ids, l_ids)
    in_pos = None
    if inp is not None:
        In = inp.part(i)
        i_ids = In.column(id_col).combine_chunks()
        check_unique(i_ids, In.column(ROW).to_numpy(), id_col=id_col, source=req.input)
        in_pos = positions(r_ids, i_ids)
    if lab_has_x:
        src, idx = embedding_matrix(L, emb_col, source=req.labels), pos
    else:
        src, idx = embedding_matrix(In, emb_col, source=req.input), in_pos
    if len(R) and len(src) and src.shape[1] != xr.shape[1]:
        raise InputError(f"{req.release}: embedding dimension {xr.shape[1]} "
                         f"differs from the original's {src.shape[1]}")  # fmt: skip
    x = np.full(xr.shape, np.nan, dtype=np.float32)
    x[idx >= 0] = src[idx[idx >= 0]]
    # Branch models (and every modifier, eq. 1) see unit-norm inputs; judge x the same.
    x = normalize_rows(x)
    x[idx < 0] = np.nan
    return _Part(ids=r_ids, rows=r_rows, xr=xr, x=x, pos=pos, in_pos=in_pos)


def _row_checks(part: _Part) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The validator's row frame (id known, finite, norm, bypass cosine); the rows whose
    release is finite; the rows finite in both the release and the original."""
    xr, x = part.xr, part.x
    finite = np.isfinite(xr).all(axis=1)
    norm = np.linalg.norm(np.where(finite[:, None], xr, 0.0), axis=1)
    # Bypass: a row (nearly) parallel to its original is unmodified, whatever its bytes.
    both = finite & np.isfinite(x).all(axis=1)
    xd = np.where(both[:, None], xr, 0.0).astype(np.float64)
    cos = np.einsum("ij,ij->i", xd, np.where(both[:, None], x, 0.0)) / np.maximum(
        np.linalg.norm(xd, axis=1), 1e-30
    )  # x rows are unit-norm already
    del xd
    rows = pd.DataFrame({"id": part.ids.to_pandas(), "in_labels": part.pos >= 0,
                         "finite": finite, "norm": np.where(finite, norm, np.nan)})  # fmt: skip
    if part.in_pos is not None:
        rows["in_input"] = part.in_pos >= 0
    rows["cosine"] = np.where(both, cos, np.nan)
    return rows, finite, both


def _keep_sample(kept: dict[str, list], part: _Part, use: np.ndarray,
                 codes: list[np.ndarray], extra: pa.Table, seed: int,
                 cap: int | None) -> None:  # fmt: skip
    """Add the rows ``use`` of this partition that may be among the attackers' sample
    (``codes``: each attribute's label codes, by label row; ``extra``: the other columns)."""
    # only this partition's `cap` smallest keys can be among the whole input's:
    # nothing else of it is copied (the kept state stays <= 2 x cap rows)
    at, key = _smallest(np.flatnonzero(use), part.ids, seed, cap)
    where = pa.array(at)
    kept["key"].append(key)
    kept["row"].append(part.rows[at])
    kept["ids"].append(part.ids.take(where))
    kept["x"].append(part.x[at])
    kept["xp"].append(part.xr[at])
    y = [c[part.pos[at]] for c in codes]
    kept["y"].append(np.stack(y, axis=1) if y else np.zeros((len(at), 0), np.int64))
    kept["extra"].append(extra.take(where))
    _bound(kept, cap)


def _set_sample(out: Scan, kept: dict[str, list], cap: int | None, attrs: list[str],
                extra_cols: list[str]) -> None:  # fmt: skip
    """The attackers' sample: the kept rows with the smallest keys, in key order (a keyed hash
    of the id, not release order: the attackers' folds then do not depend on how the release
    was sharded or its files ordered)."""
    _bound(kept, cap)
    order = np.lexsort((kept["row"][0], kept["key"][0]))
    out.ids = kept["ids"][0].take(pa.array(order))
    out.x, out.xp = kept["x"][0][order], kept["xp"][0][order]
    out.y = {a: kept["y"][0][order, j] for j, a in enumerate(attrs)}
    ex = kept["extra"][0].take(pa.array(order))
    out.extra = {c: ex.column(c).combine_chunks() for c in extra_cols}


def _smallest(at: np.ndarray, ids: pa.Array, seed: int, cap: int | None):
    """(rows ``at`` with the ``cap`` smallest sample keys, in their order; their keys)."""
    key = _sample_keys(ids.take(pa.array(at)), seed)
    if cap is not None and key.size > cap:
        sel = np.sort(np.argpartition(key, cap - 1)[:cap])
        at, key = at[sel], key[sel]
    return at, key


def _bound(kept: dict[str, list], cap: int | None) -> None:
    """Concatenate the kept candidates and keep the ``cap`` smallest keys (all if None)."""
    key = np.concatenate(kept["key"])
    sel = None
    if cap is not None and key.size > cap:
        sel = np.sort(np.argpartition(key, cap - 1)[:cap])
    cat = {
        "key": key, "row": np.concatenate(kept["row"]),
        "ids": pa.concat_arrays(kept["ids"]),
        "x": np.concatenate(kept["x"]), "xp": np.concatenate(kept["xp"]),
        "y": np.concatenate(kept["y"]), "extra": pa.concat_tables(kept["extra"]),
    }  # fmt: skip
    for k, v in cat.items():
        if sel is not None:
            v = v.take(pa.array(sel)) if isinstance(v, (pa.Array, pa.Table)) else v[sel]
        kept[k] = [v]
