"""The served model checked against the signed modifier, recomputed in-process on a sample.

The writer's cosine test (:func:`mass.batches.spill.row_flags`) cannot tell a bypassed server (one
that returns its inputs) from a modifier that leaves some rows where they were: a deterministic
eraser (LEACE, an affine map) barely moves the rows whose erased component is near zero. The
job has the export it verified (``export.json`` + the signed weights) and the rows' seeds, so it
recomputes, with that modifier loaded by :func:`mass.modifiers.load_modifier` (no pickle):

- every row the cosine test flags (near its input), and
- a seeded sample of the other rows (:data:`SAMPLE_EVERY`, at least one row per batch),

and compares them with what the server returned. A flagged row the signed modifier also leaves
unchanged is the modifier's own output: released and counted (``OWN_UNCHANGED`` / ``OWN_NEAR``);
one it would have moved stays ``UNMODIFIED`` (a bypass, refused); any recomputed row that
differs from the server's is ``MISMATCH`` (the server serves another model, refused).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mass.batches.spill import MISMATCH, NEAR, OWN_UNCHANGED, UNMODIFIED
from mass.embeddings import fixed_view
from mass.errors import ChecksumMismatchError
from mass.noise import row_seeds

SAMPLE_EVERY = 256  # rows whose public hash is 0 mod this are recomputed (plus one per batch)
# A recomputed row agrees when no coordinate differs by more than this (outputs are unit
# rows; batch size and BLAS blocking move float32 results by ~1e-7; other weights by >1e-2).
AGREE_ATOL = 1e-4


def sample_rows(ids: pa.Array) -> np.ndarray:
    """Seeded sample of a batch: rows whose public id hash is 0 mod :data:`SAMPLE_EVERY`, or
    the row with the smallest hash when none is (every batch is checked at least once)."""
    h = row_seeds(ids)
    rows = np.flatnonzero(h % SAMPLE_EVERY == 0)
    return rows if len(rows) or not len(h) else np.array([int(np.argmin(h))])


class ReferenceCheck:
    """The signed modifier's weights at ``path``, read and sha256-checked once on the driver
    (where the export was verified).

    ``carry=True`` (a runner whose workers may not see the repository: a remote Dask cluster,
    Dataflow) ships the very bytes that were checked inside the pickled job. On the default
    local runner (``carry=False``) only the path and digest travel, and a worker reads the
    file and checks its sha256 again before loading: Beam pickles and bz2-compresses a DoFn's
    state each time it builds a bundle processor, a real cost for a modifier of a few MB
    (docs/performance.md). Either way the worker recomputes with bytes whose
    digest is the verified export's, or it refuses.
    """

    def __init__(self, path: str, sha256: str, *, threads: int = 1, carry: bool = True) -> None:
        with open(path, "rb") as f:
            self._blob: bytes | None = f.read()
        self.path, self.sha256, self.threads, self.carry = path, sha256, threads, carry
        self._check(self._blob)
        self._model = None

    def __getstate__(self):
        return {**self.__dict__, "_model": None, "_blob": self._blob if self.carry else None}

    def _check(self, blob: bytes) -> None:
        import hashlib

        got = hashlib.sha256(blob).hexdigest()
        if got != self.sha256:
            raise ChecksumMismatchError(
                f"{self.path}: sha256 {got} differs from export.json's {self.sha256}; the "
                "export changed after it was verified; re-export it (`mass export`) and re-run"
            )

    def _bytes(self) -> bytes:
        if self._blob is not None:
            return self._blob
        with open(self.path, "rb") as f:
            return f.read()

    def _load(self):
        if self._model is None:
            import tempfile

            import torch

            from mass.modifiers import load_modifier

            blob = self._bytes()
            self._check(blob)  # the bytes this worker holds are the ones checked
            torch.set_num_threads(self.threads)
            with tempfile.TemporaryDirectory(prefix="mass-reference-") as tmp:
                local = f"{tmp}/modifier.pt"
                with open(local, "wb") as f:
                    f.write(blob)
                self._model = load_modifier(local)  # weights only, no pickle
        return self._model

    def outputs(self, x: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        import torch

        model = self._load()
        with torch.no_grad():
            xt = torch.from_numpy(np.array(x, dtype=np.float32))  # writable copy
            st = torch.from_numpy(np.array(seeds.reshape(-1), dtype=np.int64))
            return model(xt, st).numpy()

    def verify(self, batch: pa.RecordBatch, flags: np.ndarray, *, id_col: str, emb_col: str,
               verify_col: str, seeds) -> np.ndarray:  # fmt: skip
        """``flags`` with the flagged and sampled rows judged against the in-process output.

        ``seeds``: the handler's ROW_SEED for ids (a callable ``ids -> int64[n]``, or None for
        the zero seeds of a deterministic modifier)."""
        flagged = np.flatnonzero(flags & (UNMODIFIED | NEAR))
        rows = np.union1d(flagged, sample_rows(batch.column(id_col)))
        if not len(rows):
            return flags
        take = pa.array(rows)
        ids = batch.column(id_col).take(take)
        x = fixed_view(batch.column(verify_col).take(take), np.float32)
        s = np.zeros(len(rows), np.int64) if seeds is None else np.asarray(seeds(ids))
        ref = self.outputs(x, s)
        got = fixed_view(batch.column(emb_col).take(take), np.float32)
        agree = np.abs(got - ref).max(axis=1) <= AGREE_ATOL
        out = flags.copy()
        sub = out[rows]
        own = agree & ((sub & UNMODIFIED) > 0)
        sub[own] = (sub[own] & ~UNMODIFIED) | OWN_UNCHANGED  # the modifier's own output
        # a near row (or a sampled one) the signed modifier computes otherwise: another model
        other = ~agree & ((sub & UNMODIFIED) == 0)
        sub[other] = (sub[other] & ~NEAR) | MISMATCH
        out[rows] = sub
        return out


def reference_check(repository: str, model: str, info: dict, *, carry: bool = True):
    """The signed modifier of a verified export (``info``: its export.json), for the
    in-process recompute of flagged and sampled rows; None for an export that is no modifier.
    ``carry``: ship the checked bytes to the workers (any runner but the default local one)."""
    import os

    if not info.get("modifier") or not info.get("weights") or not info.get("sha256"):
        return None
    path = os.path.join(repository, model, str(info["version"]), info["weights"])
    return ReferenceCheck(path, str(info["sha256"]), carry=carry)
