"""The key-compromised gate tells privacy that rests on the release noise (LEACE + noise: the
key strips the noise and the non-linear attackers read S again) from privacy that does not
(ot_repair: no noise, nothing for the key to remove)."""

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
from mass.keys import OwnerKey
from mass.methods import get_method
from mass.modifiers import ChainModifier, GaussianNoiseModifier, NoiseSpec
from mass.noise import keyed_row_seeds
from tests.mass.methods.test_ot_repair import xor_case

POLICY = {"families": ["logreg", "knn"], "folds": 3, "curve": False, "gate_key_compromised": True}
SUPPRESSED = ("attribute_privacy", "expect_attribute_to_be_suppressed")
CONTEXT = "sha-of-the-model"


@pytest.fixture(scope="module")
def key():
    return OwnerKey(bytes([2]) * 32, "<test>")


@pytest.fixture(scope="module")
def data():
    return xor_case(n=3000)


def _audit(tmp, model, ds, key) -> object:
    ids = np.arange(len(ds.x), dtype=np.int64) + 1000
    seeds = torch.from_numpy(keyed_row_seeds(ids, key, CONTEXT))
    with torch.no_grad():
        xp = model.eval()(torch.as_tensor(ds.x), seeds).numpy()
    meta = {k: "x" for k in REQUIRED_METADATA}
    meta.update({
        "mass.sha256": CONTEXT, "mass.suppress": '["s"]', "mass.preserve": '["u"]',
        "mass.forced_columns": "[]", "mass.noise_key_fingerprint": key.fingerprint,
        "mass.modifier": json.dumps({"kind": model.kind, "spec": model.spec.to_dict()}),
    })  # fmt: skip
    (tmp / "release").mkdir()
    table = pa.table({"id": ids, "emb": embedding_array(xp)}).replace_schema_metadata(meta)
    pq.write_table(table, tmp / "release" / "part-00000-of-00001.parquet")
    labels = pa.table({"id": ids, "emb": embedding_array(ds.x), "s": ds.labels["s"],
                       "u": ds.labels["u"]})  # fmt: skip
    pq.write_table(labels, tmp / "labels.parquet")
    request = AuditRequest(release=str(tmp / "release"), labels=str(tmp / "labels.parquet"),
                           suppress=("s",), preserve=("u",), policy=policy_from_dict(POLICY),
                           noise_key=key)  # fmt: skip
    return run_audit(request)


def _privacy_failure(result) -> str | None:
    failed = [e for e in result.outcome.failed if (e.suite, e.expectation) == SUPPRESSED]
    return failed[0].observed if failed else None


def _key_failures(result) -> set[str]:
    """The judges of s that failed only in the key-compromised view."""
    observed = _privacy_failure(result) or ""
    failed = set(observed.split(";")[0].removeprefix("FAILED ").split(", ")) - {""}
    return {f for f in failed if f.endswith("_key") and f.removesuffix("_key") not in failed}


@pytest.mark.slow
def test_the_gate_fails_leace_plus_noise_and_adds_nothing_to_ot_repair(tmp_path, data, key):
    torch.set_num_threads(1)
    train, audited = data
    fit = {m: get_method(m).fit(train, suppress=["s"], preserve=["u"], progress=False).modifier
           for m in ("leace", "ot_repair")}  # fmt: skip
    noisy = ChainModifier.of(fit["leace"], GaussianNoiseModifier(NoiseSpec(8, 1.5)))
    (tmp_path / "noisy").mkdir()
    (tmp_path / "repair").mkdir()
    noisy_result = _audit(tmp_path / "noisy", noisy, audited, key)
    s = next(r for r in noisy_result.reports if r.name == "s")
    assert s.judge_ok("knn") and not s.judge_ok("knn_key"), (s.attackers, s.key_compromised)
    assert "knn_key" in _key_failures(noisy_result)  # the privacy rested on the noise
    # deterministic: the key-compromised view is the release, judged the same, so the gate
    # fails it only where the release itself fails (here: kNN on held-out rows, docs)
    repair_result = _audit(tmp_path / "repair", fit["ot_repair"], audited, key)
    s = next(r for r in repair_result.reports if r.name == "s")
    assert "deterministic modifier" in repair_result.key_status
    assert s.key_compromised == s.attackers
    assert _key_failures(repair_result) == set()
