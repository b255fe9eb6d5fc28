"""The in-process recompute that tells a bypass from a modifier's own near-identity rows
(mass/batches/reference.py), on a real saved modifier, without a server."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pyarrow as pa
import pytest
import torch

from mass.batches.reference import ReferenceCheck
from mass.batches.spill import MISMATCH, NEAR, OWN_UNCHANGED, UNMODIFIED, row_flags
from mass.embeddings import embedding_array
from mass.errors import ChecksumMismatchError
from mass.modifiers import save_modifier
from mass.modifiers.affine import AffineModifier, AffineSpec

D = 8


@pytest.fixture
def eraser(tmp_path):
    """x' = n(x with coordinate 0 removed): rows with x0 ~ 0 are left where they were."""
    w = torch.eye(D)
    w[0, 0] = 0.0
    path = tmp_path / "modifier.pt"
    save_modifier(AffineModifier(AffineSpec(D)).set(w, torch.zeros(D)), str(path),
                  method="leace", suppress=["a"], preserve=[])  # fmt: skip
    return str(path), hashlib.sha256(path.read_bytes()).hexdigest()


def _batch(x: np.ndarray, y: np.ndarray) -> pa.RecordBatch:
    ids = pa.array(np.arange(len(x), dtype=np.int64))
    return pa.record_batch(
        [ids, embedding_array(y), embedding_array(x)], names=["id", "emb", "src"]
    )


def _verify(check, batch):
    flags = row_flags(batch, "emb", "src", 0.9999)
    return check.verify(batch, flags, id_col="id", emb_col="emb", verify_col="src", seeds=None)


def test_rows_the_modifier_leaves_unchanged_are_its_own_and_a_bypass_is_not(eraser, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, D)).astype(np.float32)
    x[:3, 0] = 0.0  # the eraser leaves these three rows as they are
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    check = pickle.loads(pickle.dumps(ReferenceCheck(*eraser)))  # as a worker receives it
    (tmp_path / "modifier.pt").unlink()  # the worker needs no repository: the bytes travel
    served = check.outputs(x, np.zeros(len(x), np.int64))
    flags = _verify(check, _batch(x, served))
    assert (flags[:3] == OWN_UNCHANGED).all() and not (flags[3:] & (UNMODIFIED | MISMATCH)).any()

    bypass = _verify(check, _batch(x, x.copy()))  # a server returning its input
    assert (bypass[:3] == OWN_UNCHANGED).all() and (bypass[3:] & UNMODIFIED).all()

    other = served.copy()
    other[:, 1:] = np.roll(other[:, 1:], 1, axis=1)  # another model: moved, but not as signed
    got = _verify(check, _batch(x, other))
    assert (got & MISMATCH).any() and not (got & NEAR).any()


def test_weights_that_differ_from_export_json_are_refused(eraser):
    path, _ = eraser
    with pytest.raises(ChecksumMismatchError, match="differs from export.json"):
        ReferenceCheck(path, "0" * 64)


def test_on_the_local_runner_only_the_digest_travels_and_the_worker_checks_the_file(eraser):
    path, sha = eraser
    sent = pickle.dumps(ReferenceCheck(path, sha, carry=False))
    assert len(sent) < 4096  # the weights stay on disk (Beam bz2-pickles a DoFn per bundle)
    x = np.eye(2, D, dtype=np.float32)
    ok = pickle.loads(sent).outputs(x, np.zeros(2, np.int64))
    np.testing.assert_allclose(ok, ReferenceCheck(path, sha).outputs(x, np.zeros(2, np.int64)))

    with open(path, "r+b") as f:  # the file changes after the driver checked it
        f.seek(-8, 2)
        f.write(b"\0" * 8)
    with pytest.raises(ChecksumMismatchError, match="differs from export.json"):
        pickle.loads(sent).outputs(x, np.zeros(2, np.int64))
