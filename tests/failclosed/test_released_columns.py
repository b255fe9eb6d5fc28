"""Every released column is judged by what it reveals (issue 23, items 2 and 3).

Ids: the audit judges what the ids alone reveal (numeric order and blocks, string prefixes and
tokens) with the retrained attackers and the policy's limits; a release whose ids predict a
suppressed attribute fails the gate, which names the id column; nothing is published. Random
ids pass (tests/beam_pipelines/test_publication_gate.py).

High-cardinality allowed columns: modular structure (``zip = 10000 + 4k + 2*gender``) and
per-value statistics (1,241 gender-specific first names) are seen by the up-front proxy check
(refused before any inference) and by the gate's audit (with ``--force-allow``)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.audit.policy import policy_from_dict
from mass.embeddings import embedding_array
from mass.errors import AuditFailedError, ProxyColumnError
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 16, 600
INFO = {"name": "ids", "version": 1, "sha256": "abc", "method": "test",
        "suppress": ["gender"], "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip


# Overwrites the gender dimension: the embedding alone reveals nothing of gender.
PIN = PinDim(0, 5.0)


def _write(path, ids_of, rows=ROWS, **extra):
    rng = np.random.default_rng(1)
    gender = rng.integers(0, 2, rows)
    x = 0.3 * rng.normal(size=(rows, DIM))
    x[:, 0] += 3.0 * gender
    cols = {"id": ids_of(gender), "emb": embedding_array(x.astype(np.float32)),
            "gender": pa.array(gender)}  # fmt: skip
    cols.update({k: f(gender, rng) for k, f in extra.items()})
    pq.write_table(pa.table(cols), str(path))


def _run(tmp_path, src, out, *flags):
    # the stand-in names no modifier: no key view to judge, which the built-in policy refuses
    (tmp_path / "quick.yaml").write_text("audit:\n  folds: 3\n  curve: false\n"
                                         "  gate_key_compromised: false\n")  # fmt: skip
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", str(src), "--output", str(out), "--model", "ids",
            "--policy", str(tmp_path / "quick.yaml"), "--report", str(tmp_path / "report"),
            *flags]  # fmt: skip
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


def _sequential(gender):
    return pa.array(np.arange(gender.size), pa.int64())


def _zip(gender, rng):  # zip % 4 reads gender
    return pa.array(10000 + 4 * rng.integers(0, 2000, gender.size) + 2 * gender)


def _first_name(gender, rng):  # 1,241 names, each used by one gender only
    names = np.array([f"{''.join(rng.choice(list('aeioulmnrst'), 6))}{i}" for i in range(1241)])
    owner = rng.integers(0, 2, names.size)
    pick = [rng.choice(names[owner == g]) for g in gender]
    return pa.array(pick)


def _blocks(gender):  # ids assigned in one block per class
    return pa.array(gender * 100000 + np.arange(gender.size), pa.int64())


def _strings(gender):  # F-00001 / M-00002
    return pa.array([f"{'FM'[g]}-{i:05d}" for i, g in enumerate(gender)])


@pytest.mark.parametrize("ids_of", [_blocks, _strings], ids=["blocks", "prefixed"])
def test_ids_that_predict_a_suppressed_attribute_fail_the_gate(tmp_path, ids_of):
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    _write(src, ids_of)
    with pytest.raises(AuditFailedError) as info:
        _run(tmp_path, src, out)
    assert "attribute 'gender' (suppressed: worst 1.000" in str(info.value)
    assert "the id column 'id' alone predicts it" in str(info.value)
    assert f"nothing published (nothing is at {out})" in str(info.value)  # no earlier release
    assert not os.path.exists(out)  # nothing published


@pytest.mark.parametrize("column", [_zip, _first_name], ids=["zip", "first_name"])
@pytest.mark.slow
def test_a_high_cardinality_proxy_is_refused_up_front_and_fails_the_gate_if_forced(
        tmp_path, column):  # fmt: skip
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    _write(src, _sequential, rows=3000, proxy=column)
    with pytest.raises(ProxyColumnError) as info:
        _run(tmp_path, src, out, "--allow-columns", "proxy")
    msg = str(info.value)
    assert msg.startswith(
        "--allow-columns: column 'proxy' alone predicts suppressed attribute 'gender': "
    )
    assert msg.endswith("nothing was modified or published")
    assert not os.path.exists(out)
    with pytest.raises(AuditFailedError) as info:
        _run(tmp_path, src, out, "--allow-columns", "proxy", "--force-allow")
    assert "released column 'proxy' alone predicts it" in str(info.value)
    assert not os.path.exists(out)


@pytest.mark.slow
def test_the_shared_encoder_keeps_a_column_at_chance_at_chance(tmp_path):
    """No false alarm from the per-value statistics: random many-valued columns pass. (The
    statistics add nothing to chance: with seed 5, knn on the target-independent features of a
    random zip alone reads 0.54 with or without them; 8 judges x 2 scales on 2000 rows.)"""
    from mass.batches.allow_check import judge_columns

    rng = np.random.default_rng(6)
    g = rng.integers(0, 2, 2000)
    table = pa.table({"gender": pa.array(g),
                      "zip": pa.array(10000 + rng.integers(0, 4000, g.size)),
                      "name": pa.array([f"n{v}" for v in rng.integers(0, 1241, g.size)])})  # fmt: skip
    policy = policy_from_dict({"folds": 5, "curve": False})
    verdicts = judge_columns(table, ["zip", "name"], suppress=["gender"], preserve=[],
                             policy=policy)  # fmt: skip
    assert [v.passed for v in verdicts] == [True, True], [v.describe() for v in verdicts]


def test_pseudonymized_block_ids_pass_and_only_the_key_maps_them_back(
    tmp_path, monkeypatch, key_file_of
):
    """The same block ids with --pseudonymize-ids: the released ids are HMAC pseudonyms under
    the owner key's id sub-key (recorded in mass.ids, never the key), the job's id checks ran
    on them (unique, one-to-one with the input), the gate passes and the owner maps back."""
    import json

    from mass.keys import NOISE_KEY_ENV, read_key
    from mass.pseudonym import DESCRIPTION, pseudonymize

    monkeypatch.delenv(NOISE_KEY_ENV, raising=False)
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    _write(src, _blocks, rows=2000)
    with pytest.raises(Exception) as info:
        _run(tmp_path, src, out, "--pseudonymize-ids")
    assert str(info.value).startswith("--pseudonymize-ids: the pseudonyms are keyed by the owner")
    assert not os.path.exists(out)
    # a fixed key: the pseudonyms (and so the audit's id judges) are the same on every run;
    # with a fresh random key the judges' bound sat at the limit by chance once (0.550 vs 0.550)
    import hashlib

    secret = hashlib.sha256(b"test_pseudonymized_block_ids").digest()
    key_path = key_file_of(tmp_path / "owner.key", secret)
    key = read_key(key_path)
    _run(tmp_path, src, out, "--pseudonymize-ids", "--noise-key-file", key_path)
    released = pq.read_table(str(out)).column("id").combine_chunks()
    original = pq.read_table(str(src)).column("id").combine_chunks()
    mapping = dict(zip(pseudonymize(original, key).to_pylist(), original.to_pylist(), strict=True))
    assert len(mapping) == 2000 and sorted(released.to_pylist()) == sorted(mapping)
    assert all(len(v) == 32 for v in released.to_pylist())
    meta = pq.read_schema(str(next(out.glob("*.parquet")))).metadata
    assert meta[b"mass.ids"].decode() == DESCRIPTION
    manifest = (out / "_release.json").read_text()
    assert json.loads(manifest)["metadata"]["mass.ids"] == DESCRIPTION
    assert key.secret.hex() not in manifest and key.subkey("release-ids").hex() not in manifest
    assert "pseudonymous" in (out / "_RELEASE.md").read_text()
    # the leftover private copy with the pseudonymized input is gone
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("release.")) == []


def test_a_duplicate_id_is_refused_on_pseudonyms_naming_the_users_file(tmp_path):
    """The job's unique-id check runs on the pseudonyms (a duplicate id is a duplicate
    pseudonym) and the error names the user's file and row, not the private copy."""
    from mass.errors import InvalidValueError
    from mass.keys import write_key

    src, out = tmp_path / "in.parquet", tmp_path / "release"
    _write(src, lambda g: pa.array(np.r_[np.arange(g.size - 1), 7], pa.int64()))
    write_key(str(tmp_path / "owner.key"))
    with pytest.raises(InvalidValueError) as info:
        _run(tmp_path, src, out, "--pseudonymize-ids", "--noise-key-file",
             str(tmp_path / "owner.key"))  # fmt: skip
    msg = str(info.value)
    assert "id column 'id': duplicate id '" in msg
    assert f"{src} (id pseudonymized) row 7, {src} (id pseudonymized) row 599" in msg
    assert ".tmp-" not in msg and not os.path.exists(out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("release")] == []


def test_a_non_finite_row_is_refused_on_pseudonyms_naming_the_users_file_and_row(tmp_path):
    """A quarantined row of a pseudonymized job is named by its row in the user's file, not
    only by a pseudonym of a private copy that is gone when the message is read."""
    from mass.errors import QuarantineThresholdError
    from mass.keys import write_key

    src, out = tmp_path / "in.parquet", tmp_path / "release"
    _write(src, _sequential)
    t = pq.read_table(str(src))
    x = np.stack(t.column("emb").to_numpy(zero_copy_only=False)).astype(np.float32)
    x[321, 4] = np.nan
    pq.write_table(t.set_column(1, "emb", embedding_array(x)), str(src))
    write_key(str(tmp_path / "owner.key"))
    with pytest.raises(QuarantineThresholdError) as info:
        _run(tmp_path, src, out, "--pseudonymize-ids", "--noise-key-file",
             str(tmp_path / "owner.key"))  # fmt: skip
    msg = str(info.value)
    assert f"(row 321 of {src}) (non-finite)" in msg, msg
    assert msg.startswith(f"{src} (id pseudonymized): 1 rows quarantined")
    assert ".tmp-" not in msg and not os.path.exists(out)


@pytest.mark.parametrize("content", [b"", b"PAR1 not a parquet file"], ids=["empty", "garbage"])
def test_an_unreadable_file_is_refused_on_pseudonyms_naming_it(tmp_path, content):
    """A 0-byte or corrupt Parquet file met while pseudonymizing the ids gets the refusal an
    unpseudonymized read gives (before: pyarrow's ArrowInvalid traceback)."""
    from mass.errors import UnreadableInputError
    from mass.keys import write_key

    src, out = tmp_path / "in", tmp_path / "release"
    src.mkdir()
    _write(src / "part-0.parquet", _sequential)
    (src / "part-1.parquet").write_bytes(content)
    write_key(str(tmp_path / "owner.key"))
    with pytest.raises(UnreadableInputError, match=f"^{src / 'part-1.parquet'}: not readable"):
        _run(tmp_path, src, out, "--pseudonymize-ids", "--noise-key-file",
             str(tmp_path / "owner.key"))  # fmt: skip
    assert not os.path.exists(out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("release")] == []
