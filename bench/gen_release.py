"""Generate a release + held-out labels of any size, chunk by chunk (bounded memory).

    python bench/gen_release.py --rows 1000000 --dim 128 --out /tmp/d1M

writes ``OUT/rel/part-*.parquet`` (id, emb; ``--part-rows`` rows each, the contract's mass.*
metadata) and ``OUT/labels.parquet`` (id, emb = the original unit-norm embedding, digit (10
classes, dims 0-9), colour (3 classes, dims 10-12)). The release is the original with the digit
block zeroed and renormalised: ``--suppress digit --preserve colour`` passes. Release parts are
written in reverse chunk order, so the audit's id join is not a zip. Used by the memory table
of docs/performance.md (``/usr/bin/time -v mass audit ...`` / ``mass train ...``).
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mass.embeddings import embedding_array
from mass.rows import normalize_rows

META = {"mass.model": "bench", "mass.model_version": "1", "mass.sha256": "0" * 64,
        "mass.method": "bench-zero-digit-block", "mass.suppress": '["digit"]',
        "mass.preserve": '["colour"]', "mass.config_hash": "bench",
        "mass.forced_columns": "[]"}  # fmt: skip


def chunk(i: int, rows: int, dim: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, i])
    digit, colour = rng.integers(0, 10, rows), rng.integers(0, 3, rows)
    x = rng.normal(scale=0.3, size=(rows, dim)).astype(np.float32)
    x[np.arange(rows), digit] += 1.0
    x[np.arange(rows), 10 + colour] += 1.0
    x = normalize_rows(x)
    xp = x.copy()
    xp[:, :10] = 0.0
    return {"digit": digit, "colour": colour, "x": x, "xp": normalize_rows(xp)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--part-rows", type=int, default=250_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    os.makedirs(os.path.join(a.out, "rel"), exist_ok=False)
    starts = list(range(0, a.rows, a.part_rows))
    meta = {k.encode(): v.encode() for k, v in META.items()}
    writer = None
    for i, lo in enumerate(starts):
        n = min(a.part_rows, a.rows - lo)
        c = chunk(i, n, a.dim, a.seed)
        ids = pa.array(np.arange(lo, lo + n, dtype=np.int64))
        labels = pa.table({"id": ids, "emb": embedding_array(c["x"]),
                           "digit": pa.array(c["digit"]), "colour": pa.array(c["colour"])})  # fmt: skip
        if writer is None:
            writer = pq.ParquetWriter(os.path.join(a.out, "labels.parquet"), labels.schema)
        writer.write_table(labels, row_group_size=65_536)
        rel = pa.table({"id": ids, "emb": embedding_array(c["xp"])})
        j = len(starts) - 1 - i  # reverse order: part 0 holds the last ids
        pq.write_table(rel.replace_schema_metadata(meta),
                       os.path.join(a.out, "rel", f"part-{j:05d}.parquet"),
                       row_group_size=65_536)  # fmt: skip
    if writer is not None:
        writer.close()
    print(json.dumps({"rows": a.rows, "dim": a.dim, "parts": len(starts), "out": a.out}))


if __name__ == "__main__":
    main()
