"""A policy cannot be vacuous without saying so (issue 23, item 4): limits of 1 or more, a
limit at or above the original embeddings' own best attacker, or a preserved attribute that
nearly determines a suppressed one are refused (the last as a contradiction, with the measured
agreement) and nothing is published; ``audit.force_vacuous: true`` runs it and the release's
report.html and _RELEASE.md say FORCED."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import ConfigError, VacuousPolicyError
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 16, 600


def _rotate():
    """A random rotation: far from the input, gender read back perfectly."""
    q, _ = np.linalg.qr(np.random.default_rng(7).normal(size=(DIM, DIM)))

    def infer(t):
        x = np.asarray(t["EMBEDDING"], np.float32) @ q.astype(np.float32)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    return infer


def _run(tmp_path, policy: str, *, signal=3.0, twin=None):
    rng = np.random.default_rng(2)
    gender = rng.integers(0, 2, ROWS)
    x = 0.3 * rng.normal(size=(ROWS, DIM))
    x[:, 0] += signal * gender
    cols = {"id": pa.array(rng.permutation(ROWS)), "gender": pa.array(gender),
            "emb": embedding_array(x.astype(np.float32))}  # fmt: skip
    preserve = []
    if twin is not None:  # equals gender on a `twin` share of the rows
        flip = rng.random(ROWS) >= twin
        cols["title"] = pa.array(np.where(flip, 1 - gender, gender))
        x[:, 1] += 3.0 * cols["title"].to_numpy()
        cols["emb"] = embedding_array(x.astype(np.float32))
        preserve = ["title"]
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    pq.write_table(pa.table(cols), str(src))
    # the stand-in names no modifier: no key view to judge, which the built-in policy refuses
    base = "audit:\n  folds: 3\n  curve: false\n  gate_key_compromised: false\n"
    (tmp_path / "policy.yaml").write_text(base + policy)
    info = {"name": "v", "version": 1, "sha256": "abc", "method": "test", "dim": DIM,
            "suppress": ["gender"], "preserve": preserve, "config_hash": "h"}  # fmt: skip
    handler = FunctionModelHandler(_rotate, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", str(src), "--output", str(out), "--model", "v",
            "--policy", str(tmp_path / "policy.yaml"), "--report", str(tmp_path / "report")]  # fmt: skip
    anonymize.run(argv, model_handler=handler, model_info=info)
    return out


def test_limits_of_one_or_more_are_refused_and_nothing_published(tmp_path):
    with pytest.raises(VacuousPolicyError) as info:
        _run(tmp_path, "  attacker_margin: 0.9\n  frozen_margin: 0.9\n")
    msg = str(info.value)
    assert "the audit policy cannot fail: 'gender': limit 1.4" in msg and ">= 1 (baseline" in msg
    assert msg.endswith("nothing was published")
    assert isinstance(info.value, ConfigError) and not os.path.exists(tmp_path / "release")


def test_a_limit_above_the_originals_own_best_attacker_is_refused(tmp_path):
    with pytest.raises(VacuousPolicyError) as info:
        # gender weakly in the embedding (best attacker ~0.7), margins of 0.3 above ~0.5
        _run(tmp_path, "  attacker_margin: 0.3\n  frozen_margin: 0.3\n", signal=0.3)
    assert "is at or above the original embeddings' own best attacker" in str(info.value)
    assert not os.path.exists(tmp_path / "release")


def test_a_preserved_twin_of_a_suppressed_attribute_is_a_contradiction(tmp_path):
    with pytest.raises(VacuousPolicyError) as info:
        _run(tmp_path, "", twin=0.97)
    msg = str(info.value)
    assert "'gender' is suppressed but the preserved attribute(s) predict it 97% of the time" in msg
    assert "contradicts suppressing it" in msg and not os.path.exists(tmp_path / "release")


def test_a_forced_vacuous_policy_publishes_and_says_forced(tmp_path):
    out = _run(tmp_path, "  attacker_margin: 0.9\n  frozen_margin: 0.9\n  force_vacuous: true\n")
    md = (out / "_RELEASE.md").read_text()
    assert "- FORCED POLICY: 'gender': limit 1.4" in md
    page = (tmp_path / "report" / "report.html").read_text()
    assert "FORCED policy: nothing could fail" in page
