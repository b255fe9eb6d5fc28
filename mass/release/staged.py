"""The staged output's bookkeeping between the Beam writer and the publisher: each part's
sidecar (``_part-NNNNN.json``: rows and the writer's per-row flags; the one name rule, for
the writer and the reader), the empty shards that complete a part set, and what is removed
before publication (sidecars, the spills of retried bundles, the input's id index)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from mass import fs
from mass.batches.id_index import IDS_DIR
from mass.batches.parquet import WRITE_OPTIONS
from mass.batches.spill import SPILLS_DIR, disk_full
from mass.formats import shard_path

SIDECAR_PREFIX = "_part-"


def write_sidecar(directory: str, shard: int, stats: dict) -> None:
    """Part ``shard``'s sidecar, written by the writer once the part file is whole."""
    fs.write_json(fs.join(directory, f"{SIDECAR_PREFIX}{shard:05d}.json"), stats, indent=None)


def _sidecar(name: str) -> bool:
    return name.startswith(SIDECAR_PREFIX) and name.endswith(".json")


def fill_empty_shards(directory: str, schema: pa.Schema, num_shards: int) -> None:
    """Write the shards that got no row as empty files, so the file set is always complete."""
    with disk_full(directory, "an empty shard"):
        fs.makedirs(directory)
        have = set(fs.listdir(directory))
        for s in range(num_shards):
            path = shard_path(directory, s, num_shards)
            if fs.basename(path) not in have:
                with fs.atomic_output(path) as f:
                    pq.write_table(schema.empty_table(), f, **WRITE_OPTIONS)


def read_sidecars(directory: str) -> list[dict]:
    return [fs.read_json(fs.join(directory, n)) for n in fs.listdir(directory) if _sidecar(n)]


def remove_sidecars(directory: str) -> None:
    """Drop the writer's bookkeeping (sidecars, and spills of retried bundles)."""
    fs.rmtree(fs.join(directory, SPILLS_DIR))
    fs.rmtree(fs.join(directory, IDS_DIR))
    for name in fs.listdir(directory):
        if _sidecar(name):
            fs.remove(fs.join(directory, name))


def unchanged_counts(stats: list[dict]) -> dict:
    """Rows the signed modifier itself left (near) its input, summed over the sidecars:
    ``unchanged_rows`` (cosine > 1 - 1e-6) and ``near_rows`` (above the audit's max_cosine)."""
    return {"unchanged_rows": sum(int(s.get("own_unchanged") or 0) for s in stats),
            "near_rows": sum(int(s.get("own_near") or 0) for s in stats)}  # fmt: skip
