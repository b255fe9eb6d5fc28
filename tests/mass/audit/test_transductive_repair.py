"""Transductive total repair (ot_repair fitted on exactly the rows it releases) against the
real audit: on an XOR dependence every retrained attacker (and its key-compromised twin) is
within the policy without release noise where LEACE leaves the XOR whole, and it keeps a watch
attribute independent of S that the last resort (leace_project: only R's span) loses.

Not claimed: the whole privacy expectation. Exact in-sample matching makes a held-out fold
anti-learnable (its rows are the "holes" of their class in the training folds: logreg reads s
below chance), and the audit's remapped judges turn that into accuracy just above the limit
here (logreg_remap 0.56 vs 0.55, docs/calibration.md "transductive repair")."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from mass.audit import AuditRequest, policy_from_dict, run_audit
from mass.audit.suite import REQUIRED_METADATA
from mass.embeddings import embedding_array
from mass.io import EmbeddingDataset, LabelEncoding
from mass.keys import OwnerKey
from mass.methods import get_method

POLICY = {"families": ["logreg", "mlp", "gboost", "knn"], "folds": 3, "curve": False,
          "gate_key_compromised": True}  # fmt: skip
FITS = {
    "repair": ("ot_repair", {"transductive": True}),
    "leace": ("leace", {}),
    "last_resort": ("leace_project", {}),
}


def xor_with_watch(n: int = 1500, dim: int = 8, seed: int = 3) -> EmbeddingDataset:
    """s = a XOR b (no linear information, every non-linear attacker reads it); u (preserved)
    and w (watched, named by no flag) are independent of s and of each other."""
    rng = np.random.default_rng(seed)
    a, b, u, w = rng.integers(0, 2, (4, n))
    x = rng.normal(scale=0.3, size=(n, dim))
    x[:, 0] += 2 * a - 1
    x[:, 1] += 2 * b - 1
    x[:, 2] += 1.5 * (2 * u - 1)
    x[:, 4] += 1.5 * (2 * w - 1)
    x[:, 3] += 3.0  # off the origin: unit normalisation keeps the quadrants apart
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = {"s": a ^ b, "u": u, "w": w}
    return EmbeddingDataset(
        ids=pa.array(np.arange(n, dtype=np.int64) + 5000), x=x.astype(np.float32),
        labels={k: v.astype(np.int64) for k, v in labels.items()},
        encodings={k: LabelEncoding(k, (0, 1)) for k in labels}, source="xor+w",
    )  # fmt: skip


def _audit(tmp, model, ds: EmbeddingDataset, key: OwnerKey):
    """The real audit of ``model``'s release of ``ds`` (the rows it was fitted on)."""
    ids = ds.ids.to_numpy()
    with torch.no_grad():
        xp = model.eval()(torch.as_tensor(ds.x)).numpy()
    meta = {k: "x" for k in REQUIRED_METADATA}
    meta.update({
        "mass.sha256": "m", "mass.suppress": '["s"]', "mass.preserve": '["u"]',
        "mass.forced_columns": "[]", "mass.noise_key_fingerprint": key.fingerprint,
        "mass.modifier": json.dumps({"kind": model.kind, "spec": model.spec.to_dict()}),
    })  # fmt: skip
    tmp.mkdir()
    table = pa.table({"id": ids, "emb": embedding_array(xp)}).replace_schema_metadata(meta)
    pq.write_table(table, tmp / "release.parquet")
    labels = {"id": ids, "emb": embedding_array(ds.x), **ds.labels}
    pq.write_table(pa.table(labels), tmp / "labels.parquet")
    request = AuditRequest(release=str(tmp / "release.parquet"),
                           labels=str(tmp / "labels.parquet"), suppress=("s",), preserve=("u",),
                           watch=("w",), policy=policy_from_dict(POLICY), noise_key=key)  # fmt: skip
    return run_audit(request)


def _direct_judges_ok(result) -> bool:
    """Every retrained attacker on the release and with the key (not the remapped ones)."""
    s = next(r for r in result.reports if r.name == "s")
    return all(s.judge_ok(f) and s.judge_ok(f"{f}_key") for f in POLICY["families"])


@pytest.mark.slow
def test_transductive_repair_is_within_the_policy_for_retrained_attackers_and_keeps_the_watch(
    tmp_path,
):
    torch.set_num_threads(1)
    ds = xor_with_watch()
    key = OwnerKey(bytes([5]) * 32, "<test>")
    results = {}
    for name, (method, params) in FITS.items():
        fit = get_method(method).fit(ds, suppress=["s"], preserve=["u"], params=params,
                                     progress=False)  # fmt: skip
        results[name] = _audit(tmp_path / name, fit.modifier, ds, key)
    repair, leace = results["repair"], results["leace"]
    s = next(r for r in repair.reports if r.name == "s")
    assert _direct_judges_ok(repair), s.attackers
    assert "deterministic modifier" in repair.key_status  # no noise for a key to strip
    assert not _direct_judges_ok(leace)  # the XOR is left whole to the non-linear attackers
    kept = {n: r.unnamed["watch"]["w"]["kept"] for n, r in results.items()}
    assert kept["repair"] >= 0.8 and kept["last_resort"] <= 0.2, kept
