"""transforms.modify.BatchModifier: the one per-batch core of the `mass anonymize` job and of
:class:`transforms.api.Anonymize`. The same rows through both routes give the same bytes, the
same dead letters with the same reasons, and the same refusals; a handler that does not keep
its input where the bypass check reads it is refused by name.

In-process (a signed export of a stochastic modifier, served by FunctionModelHandler with the
signed weights, real Beam FnApiRunner, the session's owner key): no tritonserver.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines import anonymize
from mass.errors import ConfigError, ReleaseError, ServingError
from mass.serving.contract import EMBEDDING, export_info
from transforms.api import Anonymize
from transforms.inference.function import FunctionModelHandler, TorchModifierFunction
from transforms.modify import BatchModifier, ModifyRowGroupFn

DIM, ROWS = 16, 400
BROKEN = {3: "non-finite", 11: "zero-vector", 20: "wrong-dimension", 31: "null"}  # row: reason


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """A signed export of a stochastic DataModifier (its noise is keyed by ROW_SEED)."""
    from mass.modifiers import DataModifier, ModifierSpec, save_modifier
    from mass.serving.export import export_modifier

    base = tmp_path_factory.mktemp("onepath")
    torch.manual_seed(0)
    (base / "run").mkdir()
    save_modifier(DataModifier(ModifierSpec(DIM, hidden=(32,), noise_dim=4)),
                  str(base / "run" / "modifier.pt"), method="mass", suppress=["s"], preserve=[],
                  config_hash="onepath")  # fmt: skip
    repo = str(base / "repo")
    export_modifier(base / "run", repo, "mod")
    info = export_info(repo, "mod")
    assert info["stochastic"]
    return repo, info, f"{repo}/mod/{info['version']}/{info['weights']}"


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """Odd, unsorted ids; a list<float32> column with one row of each quarantine reason; one
    kept column. One row group (one batch on both routes: same float32 blocking)."""
    rng = np.random.default_rng(7)
    ids = rng.permutation(50 * ROWS)[:ROWS].astype(np.int64) * 3 + 1
    x = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    x[3, 5], x[11] = np.nan, 0.0
    emb = [list(map(float, r)) for r in x]
    emb[20], emb[31] = emb[20][:5], None
    t = pa.table({"id": ids, "emb": pa.array(emb, pa.list_(pa.float32())),
                  "k": rng.integers(0, 3, ROWS)})  # fmt: skip
    path = str(tmp_path_factory.mktemp("in") / "in.parquet")
    pq.write_table(t, path)
    return path, t


def _handler(load, keep=anonymize.INPUT_COPY):
    return FunctionModelHandler(load, output_dim=DIM, keep_input_as=keep)


def _job(src, out, handler, info):
    argv = ["--input", src, "--output", str(out), "--model", "mod", "--allow-columns", "k",
            "--max-quarantined", str(len(BROKEN)), "--no-audit"]  # fmt: skip
    return anonymize.run(argv, model_handler=handler, model_info=info)


class _ReturnsInput:
    """A bypassed server: every row comes back as it went in."""

    def __call__(self):
        return lambda t: np.array(t[EMBEDDING], np.float32)


def _by_id(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(batches).sort_by("id")


@pytest.mark.parametrize("rows", ["record batches", "dicts"])
def test_the_job_and_anonymize_release_the_same_rows_and_dead_letters(export, table, tmp_path,
                                                                      rows):  # fmt: skip
    repo, info, weights = export
    src, t = table
    _job(src, tmp_path / "out", _handler(TorchModifierFunction(weights)), info)
    release = pq.read_table(tmp_path / "out").sort_by("id")
    dead = pq.read_table(tmp_path / "out_quarantine")
    want_dead = sorted(zip(dead.column("id").to_pylist(), dead.column("reason").to_pylist(),
                           strict=True))  # fmt: skip
    assert want_dead == sorted((int(t["id"][r].as_py()), why) for r, why in BROKEN.items())
    want_ids = release.column("id").to_pylist()
    want_x = np.stack(release.column("emb").to_numpy(zero_copy_only=False)).astype(np.float32)
    want_k = release.column("k").to_pylist()
    exact = rows == "record batches"  # dicts are batched by BatchElements: other float blocking

    def same_rows(got):
        got = _by_id(got) if exact else pa.Table.from_pylist(got).sort_by("id")
        assert got.column_names == ["id", "emb", "k"]
        assert got.column("id").to_pylist() == want_ids
        assert got.column("k").to_pylist() == want_k
        x = np.stack(got.column("emb").to_numpy(zero_copy_only=False)).astype(np.float32)
        if exact:
            assert x.tobytes() == want_x.tobytes()
        else:
            np.testing.assert_allclose(x, want_x, atol=1e-6)

    def reasons(bad):
        if exact:
            bad = _by_id(bad).to_pylist()
        return sorted((b["id"], b["reason"]) for b in bad)

    anon = Anonymize("mod", repository=repo, handler=_handler(TorchModifierFunction(weights)),
                     keep_columns=["k"])  # fmt: skip
    items = t.to_batches() if exact else t.to_pylist()
    with TestPipeline() as p:
        out = p | beam.Create(items, reshuffle=False) | anon
        assert_that(out.rows | "Rows" >> beam.combiners.ToList(), lambda got: same_rows(got[0]))
        assert_that(out.quarantined | "Dead" >> beam.combiners.ToList() | beam.Map(reasons),
                    equal_to([want_dead]), label="DeadLetters")  # fmt: skip


def test_a_bypassed_server_is_refused_by_both_routes(export, table, tmp_path):
    repo, info, _ = export
    src, t = table
    with pytest.raises(ReleaseError, match="modifier was bypassed"):
        _job(src, tmp_path / "out", _handler(_ReturnsInput()), info)
    assert not (tmp_path / "out").exists()
    anon = Anonymize("mod", repository=repo, handler=_handler(_ReturnsInput()))
    with pytest.raises(Exception, match=r"Anonymize: 396 row\(s\) came back unmodified"):
        with TestPipeline() as p:
            _ = p | beam.Create(t.select(["id", "emb"]).to_batches(), reshuffle=False) | anon


def test_the_core_flags_a_bypass_that_its_reference_check_confirms(export, table):
    """Unit level: the core's flags are what both routes refuse (UNMODIFIED here)."""
    from mass.batches.reference import reference_check
    from mass.batches.spill import UNMODIFIED
    from transforms.modify import REFUSED

    repo, info, _ = export
    _, t = table
    core = BatchModifier(_handler(_ReturnsInput()), columns=["id", "emb"], id_col="id",
                         emb_col="emb", dim=DIM, verify_col=anonymize.INPUT_COPY,
                         reference=reference_check(repo, "mod", info), seeds=None)  # fmt: skip
    core.load()
    out, flags, bad = core.process(t.to_batches()[0])
    core.close()
    assert bad.num_rows == len(BROKEN) and out.num_rows == ROWS - len(BROKEN)
    assert ((flags & UNMODIFIED) > 0).all() and ((flags & REFUSED) > 0).all()
    with pytest.raises(ServingError, match="came back unmodified"):
        core.refuse(out, flags, "test")


def test_a_handler_keeping_its_input_elsewhere_is_refused_by_name(export, tmp_path):
    repo, _, weights = export
    for keep in (None, "__other"):
        with pytest.raises(ConfigError, match="keep_input_as='__mass_input'"):
            Anonymize("mod", repository=repo, handler=_handler(TorchModifierFunction(weights),
                                                              keep))  # fmt: skip
        with pytest.raises(ConfigError, match="keep_input_as='__mass_input'"):
            ModifyRowGroupFn(_handler(TorchModifierFunction(weights), keep),
                             stage=str(tmp_path), columns=["id", "emb"], batch_rows=64,
                             id_col="id", emb_col="emb", dim=DIM, num_shards=1,
                             verify_col=anonymize.INPUT_COPY)  # fmt: skip


EXPORTS = {  # export.json fields -> whether a release needs the owner key
    "stochastic modifier": ({"modifier": {"kind": "mass"}, "stochastic": True}, True),
    "deterministic modifier": ({"modifier": {"kind": "affine"}, "stochastic": False}, False),
    "older noise baseline": ({"stochastic": False}, True),  # false without modifier: not trusted
    "no export (a remote server)": ({}, True),
}


@pytest.mark.parametrize("name", list(EXPORTS))
def test_the_job_and_anonymize_need_the_owner_key_for_the_same_models(name, monkeypatch):
    """Without a key, both routes refuse exactly the models whose noise could be public."""
    from types import SimpleNamespace

    from beam_pipelines.preflight import check_noise_key
    from mass.keys import NOISE_KEY_ENV
    from transforms.api import _seeds

    monkeypatch.delenv(NOISE_KEY_ENV)
    info, needed = EXPORTS[name]
    refused = []
    for route in (lambda: check_noise_key(SimpleNamespace(noise_key=None, model="m"), info),
                  lambda: _seeds({"name": "m", **info}, None)):  # fmt: skip
        try:
            route()
            refused.append(False)
        except ConfigError as e:
            assert "noise" in str(e) and "key" in str(e)
            refused.append(True)
    assert refused == [needed, needed]
