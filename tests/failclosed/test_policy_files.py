"""A policy file is what it seems: a --policy file without an ``audit:`` mapping (or with a
misspelt ``audti:``) is refused naming the file and the key; a duplicated key is refused
naming it; an override for an attribute the audit does not judge is refused naming it; and
`mass audit` reads the same default policy as the anonymize gate (./params.yaml when present,
else the built-in one) and both print where it came from."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass.audit.policy import load_policy
from mass.errors import ConfigError


def test_a_policy_file_without_audit_is_refused_naming_file_and_key(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text("audti:\n  attacker_margin: 0.9\n")
    with pytest.raises(ConfigError) as info:
        load_policy(str(p))
    msg = str(info.value)
    assert str(p) in msg and "no 'audit:' mapping" in msg and "'audti'" in msg
    p.write_text("train:\n  suppress: digit\n")
    from mass.audit.policy import resolve_policy

    with pytest.raises(ConfigError, match="no 'audit:' mapping"):
        resolve_policy(str(p))


def test_a_duplicate_key_is_refused(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text("audit:\n  attacker_margin: 0.05\naudit:\n  attacker_margin: 0.9\n")
    with pytest.raises(ConfigError) as info:
        load_policy(str(p))
    assert str(p) in str(info.value) and "duplicate key 'audit'" in str(info.value)
    p.write_text("audit:\n  folds: 3\n  folds: 5\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'folds' \(line 3"):
        load_policy(str(p))


def test_an_override_for_an_attribute_not_judged_is_refused(tmp_path):
    from mass.audit.runner import AuditRequest, run_audit

    rng = np.random.default_rng(0)
    rel, lab = tmp_path / "rel.parquet", tmp_path / "lab.parquet"
    x = rng.normal(size=(60, 4)).astype(np.float32)
    from mass.embeddings import embedding_array

    pq.write_table(pa.table({"id": pa.array(np.arange(60)), "emb": embedding_array(x)}), rel)
    pq.write_table(pa.table({"id": pa.array(np.arange(60)), "emb": embedding_array(x),
                             "gender": pa.array(rng.integers(0, 2, 60))}), lab)  # fmt: skip
    p = tmp_path / "policy.yaml"
    p.write_text("audit:\n  suppress: {gendr: 0.5}\n  preserve: {age: 0.5}\n")
    req = AuditRequest(release=str(rel), labels=str(lab), suppress=("gender",),
                       policy=load_policy(str(p)))  # fmt: skip
    with pytest.raises(ConfigError) as info:
        run_audit(req)
    msg = str(info.value)
    assert "audit.suppress.gendr" in msg and "audit.preserve.age" in msg
    assert "this audit does not judge" in msg


def test_mass_audit_and_the_gate_read_the_same_default_policy(tmp_path, monkeypatch):
    from beam_pipelines import plan
    from mass.audit.policy import resolve_policy

    monkeypatch.chdir(tmp_path)
    pol, source = resolve_policy(None)
    assert source.startswith("built-in defaults")
    (tmp_path / "params.yaml").write_text("audit:\n  attacker_margin: 0.07\n")
    pol, source = resolve_policy(None)
    assert pol.attacker_margin["gboost"] == 0.07 and source == "params.yaml (audit:)"
    assert getattr(plan, "resolve_policy", resolve_policy) is resolve_policy  # one reader
    from mass.calibrate.flow import read_policy  # mass train's calibration: the same reader

    assert read_policy(None)[1] == "params.yaml (audit:)"
    (tmp_path / "params.yaml").write_text("audti:\n  attacker_margin: 0.01\n")
    with pytest.raises(ConfigError, match="audti"):  # was: calibrated to the built-in 0.05
        read_policy(None)
    with pytest.raises(ConfigError, match="audti"):
        resolve_policy(None)


def test_mass_audit_prints_its_policy_source(tmp_path, monkeypatch, capsys):
    from mass.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("audit:\n  attacker_margin: 0.95\n  folds: 3\n")
    rng = np.random.default_rng(0)
    from mass.embeddings import embedding_array

    g = rng.integers(0, 2, 200)
    x = rng.normal(size=(200, 4)).astype(np.float32)
    x[:, 0] += 3 * g
    pq.write_table(pa.table({"id": pa.array(np.arange(200)), "emb": embedding_array(x)}),
                   tmp_path / "rel.parquet")  # fmt: skip
    pq.write_table(pa.table({"id": pa.array(np.arange(200)), "emb": embedding_array(x),
                             "gender": pa.array(g)}), tmp_path / "lab.parquet")  # fmt: skip
    # ./params.yaml's vacuous margins are what the gate would read: the audit refuses them too
    code = main(["audit", "--release", "rel.parquet", "--labels", "lab.parquet",
                 "--suppress", "gender", "--report", "rep", "--no-chart"])  # fmt: skip
    said = capsys.readouterr()
    assert code == 2 and "cannot fail" in said.err, said.err
    assert "policy from params.yaml (audit:)" in said.out
