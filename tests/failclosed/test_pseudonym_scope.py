"""Pseudonyms per release on request (``--pseudonym-scope``), the owner's map kept privately,
and the documented HMAC construction pinned by reference vectors (mass.pseudonym).

``stable`` (the default) links every release under one key: the same id, the same pseudonym.
``release`` draws a fresh scope per job: two releases of the same rows share no pseudonym, and
the owner maps back through the private map in ``$MASS_STATE_DIR/pseudonym-maps/`` (never
under the release prefix); a failed job leaves no map."""

from __future__ import annotations

import hashlib
import hmac
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import ConfigError, InvalidValueError
from mass.keys import OwnerKey, read_key
from mass.pseudonym import pseudonymize
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 8, 300
INFO = {"name": "ids", "version": 1, "sha256": "abc", "method": "test", "suppress": ["g"],
        "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip
SECRET = hashlib.sha256(b"mass pseudonym reference key").digest()


def _recipe(secret: bytes, message: bytes, label: bytes = b"") -> str:
    """docs/threat-model.md and mass/pseudonym.py, by hand: the 'release-ids' sub-key is
    BLAKE2b(key=secret, person='release-ids', 32 bytes); a scope key is HMAC-SHA256 of
    'mass-pseudonym-scope:' + label under it; the pseudonym the first 32 hex digits."""
    sub = hashlib.blake2b(b"", key=secret, person=b"release-ids", digest_size=32).digest()
    if label:
        sub = hmac.new(sub, b"mass-pseudonym-scope:" + label, hashlib.sha256).digest()
    return hmac.new(sub, message, hashlib.sha256).hexdigest()[:32]


@pytest.mark.parametrize(
    ("ids", "canonical", "expected"),
    [
        (pa.array([7], pa.int64()), b"i:7", "f663e98caba0fbcc385d44055397b512"),
        (pa.array([-42], pa.int8()), b"i:-42", "1f4c5d8650500714c04741e1591e64a4"),
        (pa.array(["a-7\u00e9"]), "s:a-7\u00e9".encode(), "9575f3355abfe3de9769129afd259ae0"),
        (pa.array([b"\x00\xff"]), b"b:\x00\xff", "6c611849a78a4baba7dc7cafaa52d7ef"),
    ],
)
def test_the_stable_construction_matches_its_reference_vectors(ids, canonical, expected):
    assert _recipe(SECRET, canonical) == expected
    assert pseudonymize(ids, OwnerKey(SECRET)).to_pylist() == [expected]


def test_the_model_scope_matches_its_reference_vector():
    expected = "7961f0fba92c299b18005cf808f88f5d"
    assert _recipe(SECRET, b"i:7", b"model:mod") == expected
    assert pseudonymize(pa.array([7]), OwnerKey(SECRET), "model:mod").to_pylist() == [expected]


def _write(path, ids=None):
    rng = np.random.default_rng(3)
    g = rng.integers(0, 2, ROWS)
    x = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    ids = np.arange(1000, 1000 + ROWS) if ids is None else ids
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "emb": embedding_array(x),
                             "g": pa.array(g)}), str(path))  # fmt: skip


# a change, so the release is not the input (the job checks)
PIN = PinDim(0, 5.0)


def _run(src, out, key_path, *flags):
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", str(src), "--output", str(out), "--model", "ids", "--no-audit",
            "--pseudonymize-ids", "--noise-key-file", key_path, *flags]  # fmt: skip
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


@pytest.fixture
def state(tmp_path, monkeypatch):
    where = tmp_path / "owner-state"
    monkeypatch.setenv("MASS_STATE_DIR", str(where))
    return where


def test_per_release_pseudonyms_share_nothing_and_the_owner_maps_back(tmp_path, key_file_of, state):
    src = tmp_path / "in.parquet"
    _write(src)
    key_path = key_file_of(tmp_path / "owner.key", SECRET)
    a = _run(src, tmp_path / "a", key_path, "--pseudonym-scope", "release")
    b = _run(src, tmp_path / "b", key_path, "--pseudonym-scope", "release")
    ra = pq.read_table(str(tmp_path / "a")).column("id").to_pylist()
    rb = pq.read_table(str(tmp_path / "b")).column("id").to_pylist()
    assert len(ra) == len(rb) == ROWS and not set(ra) & set(rb)  # nothing joins
    stable = set(pseudonymize(pq.read_table(str(src)).column("id"), read_key(key_path)).to_pylist())
    assert not (set(ra) | set(rb)) & stable
    for summary, released in ((a, ra), (b, rb)):
        path = summary["pseudonym_map"]
        assert path.startswith(str(state / "pseudonym-maps") + os.sep)
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
        owner = pq.read_table(path)
        back = dict(zip(owner.column("pseudonym").to_pylist(), owner.column("id").to_pylist(),
                        strict=True))  # fmt: skip
        assert sorted(back[p] for p in released) == list(range(1000, 1000 + ROWS))
        meta = pq.read_schema(str(next((tmp_path / ("a" if released is ra else "b")).glob(
            "*.parquet")))).metadata[b"mass.ids"].decode()  # fmt: skip
        assert "pseudonymous per release" in meta and os.path.basename(path) in meta
        assert "release:" not in meta  # the scope's label stays private
    released_files = [str(p) for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in released_files if "pseudonym-maps" in p and "owner-state" not in p]


def test_the_model_scope_is_one_per_model_and_the_default_stays_stable(
    tmp_path, key_file_of, state
):
    src = tmp_path / "in.parquet"
    _write(src)
    key_path = key_file_of(tmp_path / "owner.key", SECRET)
    key, ids = read_key(key_path), pq.read_table(str(src)).column("id")
    _run(src, tmp_path / "m", key_path, "--pseudonym-scope", "model")
    _run(src, tmp_path / "s", key_path)
    model = pq.read_table(str(tmp_path / "m")).column("id").to_pylist()
    assert sorted(model) == sorted(pseudonymize(ids, key, "model:ids").to_pylist())
    stable = pq.read_table(str(tmp_path / "s")).column("id").to_pylist()
    assert sorted(stable) == sorted(pseudonymize(ids, key).to_pylist())
    assert not os.path.exists(state / "pseudonym-maps")  # only a per-release scope needs one


def test_a_scope_without_pseudonyms_is_refused(tmp_path):
    src = tmp_path / "in.parquet"
    _write(src)
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    with pytest.raises(ConfigError, match="--pseudonym-scope release: pseudonyms are made only"):
        anonymize.run(["--input", str(src), "--output", str(tmp_path / "o"), "--model", "ids",
                       "--no-audit", "--pseudonym-scope", "release"], model_handler=handler,
                      model_info=INFO)  # fmt: skip


def test_a_failed_job_leaves_no_map(tmp_path, key_file_of, state):
    src = tmp_path / "in.parquet"
    _write(src, ids=np.r_[np.arange(ROWS - 1), 5])  # a duplicate id: refused after the copy
    key_path = key_file_of(tmp_path / "owner.key", SECRET)
    with pytest.raises(InvalidValueError, match="duplicate id"):
        _run(src, tmp_path / "o", key_path, "--pseudonym-scope", "release")
    assert (state / "pseudonym-maps").is_dir()  # the map was begun, then removed
    assert list((state / "pseudonym-maps").iterdir()) == []
