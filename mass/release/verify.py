"""Every invariant of a staged release, checked before its audit and publication
(:func:`verify_release`): the part set, the writer's per-row flags (bypass, non-finite,
mismatch with the in-process recompute), the share of rows the modifier itself left unchanged,
the columns and their provenance metadata, and the ids one-to-one with the input's (in memory,
or streamed against the input's id index: :func:`verify_against_index`)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from mass.batches.id_index import IdIndex
from mass.batches.parquet import footer, open_parquet
from mass.errors import ReleaseError
from mass.formats import part_files, shard_path
from mass.release.columns import META_KEYS
from mass.release.staged import read_sidecars, unchanged_counts

# A modifier that leaves more than this fraction of rows equal to their input (cosine > 1 -
# 1e-6) is identity-like, even where it does so itself: refused. A rank-1 eraser leaves the rows
# whose erased component is ~0 (0.7 % at d=16, ~2.5 % expected at d=512); an identity map, 100 %.
MAX_UNCHANGED_FRACTION = 0.5


def _check_unchanged(stats: list[dict]) -> None:
    rows = sum(int(s.get("rows") or 0) for s in stats)
    same = unchanged_counts(stats)["unchanged_rows"]
    if rows and same > MAX_UNCHANGED_FRACTION * rows:
        first = min((s["first_own_unchanged_id"] for s in stats if s.get("own_unchanged")),
                    default=None)  # fmt: skip
        raise ReleaseError(
            f"{same} of {rows} released rows ({same / rows:.1%}) equal their input embedding "
            f"up to scale (first id {first!r}), more than the {MAX_UNCHANGED_FRACTION:.0%} a "
            "modifier may leave unchanged: the signed modifier itself is (near-)identity; "
            "retrain it; nothing published"
        )


def verify_release(
    staging: str,
    *,
    expected_ids,
    id_col: str,
    emb_col: str,
    allow_columns: list[str],
    num_shards: int,
    required_metadata: tuple[str, ...] = META_KEYS,
    quarantined: pa.Array | None = None,
) -> int:
    """Raise :class:`ReleaseError` unless the staged release satisfies every invariant.

    ``expected_ids``: the valid input ids (an array), or a :class:`mass.batches.id_index.IdIndex`
    of all input ids with the ``quarantined`` ones to leave out (streamed, bounded memory).
    """
    stats = read_sidecars(staging)
    files = part_files(staging)
    if len(files) != num_shards:
        raise ReleaseError(f"{staging}: {len(files)} part files, expected {num_shards}")
    for s in stats:
        if s.get("unmodified"):
            raise ReleaseError(
                f"{s['unmodified']} released row(s) equal their input embedding up to scale "
                f"(cosine similarity > 1 - 1e-6; first id {s['first_unmodified_id']!r}) and "
                "the signed modifier, recomputed in-process, would have changed them (or "
                "the job had no signed modifier to recompute with: pass --repository): the "
                "modifier was bypassed; nothing published"
            )
        if s.get("mismatch"):
            raise ReleaseError(
                f"{s['mismatch']} released row(s) differ from the signed modifier's own output "
                f"recomputed in-process (first id {s['first_mismatch_id']!r}): the server "
                "serves another model than the export the job verified; check --triton-url "
                "and --repository; nothing published"
            )
        if s.get("nonfinite"):
            raise ReleaseError(
                f"{s['nonfinite']} row(s) with NaN/Inf (first id "
                f"{s['first_nonfinite_id']!r}); nothing published"
            )
    _check_unchanged(stats)
    allowed = {id_col, emb_col, *allow_columns}
    ids = []
    for path in files:
        pf = open_parquet(path)
        schema = pf.schema_arrow
        extra = [c for c in schema.names if c not in allowed]
        if extra:
            raise ReleaseError(f"{path}: columns {extra} are not allow-listed; nothing published")
        missing = [k for k in required_metadata if k.encode() not in (schema.metadata or {})]
        if missing:
            raise ReleaseError(f"{path}: metadata {missing} missing; nothing published")
        typ = schema.field(emb_col).type
        if not (pa.types.is_fixed_size_list(typ) and typ.value_type == pa.float32()):
            raise ReleaseError(f"{path}: column '{emb_col}' is {typ}, expected float32 list")
        if isinstance(expected_ids, pa.Array | pa.ChunkedArray):
            ids.append(pf.read(columns=[id_col]).column(id_col))
    if not isinstance(expected_ids, pa.Array | pa.ChunkedArray):
        return verify_against_index(staging, expected_ids, id_col=id_col, quarantined=quarantined)
    got = pa.chunked_array([c for a in ids for c in a.chunks], type=expected_ids.type)
    if len(got) != len(expected_ids):
        raise ReleaseError(
            f"{staging}: {len(got)} rows released for {len(expected_ids)} "
            "valid input rows; nothing published"
        )
    if got.null_count or len(pc.unique(got)) != len(got):
        raise ReleaseError(f"{staging}: null or duplicate ids in the release; nothing published")
    a = pc.take(got, pc.sort_indices(got)).combine_chunks()
    b = pc.take(expected_ids, pc.sort_indices(expected_ids))
    if not a.equals(b.combine_chunks() if isinstance(b, pa.ChunkedArray) else b):
        raise ReleaseError(f"{staging}: released ids differ from the input ids; nothing published")
    return len(got)


def verify_against_index(
    staging: str, index: IdIndex, *, id_col: str, quarantined: pa.Array | None = None
) -> int:
    """Raise :class:`ReleaseError` unless part k of ``staging`` holds exactly shard k's input
    ids minus ``quarantined``; returns the number of released rows."""
    released = sum(
        footer(shard_path(staging, s, index.num_shards)).num_rows for s in range(index.num_shards)
    )
    n_bad = 0 if quarantined is None else len(quarantined)
    if released != index.rows - n_bad:
        raise ReleaseError(
            f"{staging}: {released} rows released for {index.rows - n_bad} "
            "valid input rows; nothing published"
        )
    for s in range(index.num_shards):
        want = index.sorted_ids(s)
        if quarantined is not None and len(quarantined):
            want = (a.filter(pc.invert(pc.is_in(a, value_set=quarantined))) for a in want)
        got = _part_ids(shard_path(staging, s, index.num_shards), id_col)
        if not _same_stream(want, got):
            raise ReleaseError(
                f"{staging}: released ids differ from the input ids; nothing published"
            )
    return released


def _part_ids(path: str, id_col: str) -> Iterator[pa.Array]:
    pf = open_parquet(path)
    for rg in range(pf.metadata.num_row_groups):
        yield pf.read_row_group(rg, columns=[id_col]).column(0).combine_chunks()


def _same_stream(a: Iterator[pa.Array], b: Iterator[pa.Array]) -> bool:
    """Two streams of arrays hold the same sequence of values (chunking may differ)."""
    abuf = bbuf = None
    while True:
        while abuf is None or not len(abuf):
            abuf = next(a, None)
            if abuf is None:
                break
        while bbuf is None or not len(bbuf):
            bbuf = next(b, None)
            if bbuf is None:
                break
        if abuf is None or bbuf is None:
            return abuf is None and bbuf is None
        n = min(len(abuf), len(bbuf))
        if not abuf.slice(0, n).cast(bbuf.type).equals(bbuf.slice(0, n)):
            return False
        abuf, bbuf = abuf.slice(n), bbuf.slice(n)
