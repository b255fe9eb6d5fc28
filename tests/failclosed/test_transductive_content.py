"""A transductive repair is bound to its rows' content, not their ids alone (mass.fitrows):
the fitted ids carrying other embeddings are other rows, refused before a row reaches the
model, under ``--no-audit`` too; the rows it was fitted on, in another order, still release."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from beam_pipelines import anonymize
from mass.errors import TransductiveRowsError
from mass.fitrows import check_fitted_rows, rows_digest
from mass.io import load_embeddings
from mass.testing.stand_ins import transductive_repair
from transforms.inference.function import FunctionModelHandler, TorchModifierFunction

DIM = 16


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    torch.set_num_threads(1)
    where = str(tmp_path_factory.mktemp("transductive_content"))
    return transductive_repair(where, rows=300, dim=DIM, row_group=120, steps=2, epochs=3)


def _run(src, out, path, info):
    handler = FunctionModelHandler(TorchModifierFunction(path), output_dim=DIM,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    argv = ["--input", src, "--output", out, "--model", "repair", "--no-audit"]
    return anonymize.run(argv, model_handler=handler, model_info=info)


def _with_embeddings(src: str, dst: str, x: np.ndarray) -> None:
    table = pq.read_table(src)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(x.astype(np.float32).ravel()), DIM)
    pq.write_table(table.set_column(table.column_names.index("emb"), "emb", emb), dst)


@pytest.mark.parametrize("change", ["other embeddings", "one bit of one row", "rows swapped"])
def test_the_fitted_ids_with_other_embeddings_are_refused(fitted, tmp_path, change):
    src, path, info = fitted
    x = load_embeddings(src).x.copy()
    if change == "other embeddings":  # another sample's embeddings under the fitted ids
        x = np.random.default_rng(7).normal(size=x.shape).astype(np.float32)
    elif change == "one bit of one row":
        x.view(np.uint32)[17, 3] ^= 1
    else:  # two rows' embeddings exchanged: the same multiset, other rows
        x[[4, 9]] = x[[9, 4]]
    bad = str(tmp_path / "same_ids.parquet")
    _with_embeddings(src, bad, x)
    out = str(tmp_path / "rel")
    with pytest.raises(TransductiveRowsError, match=r"same_ids\.parquet: model 'repair'.*same ids "
                       r"with other embeddings \(column 'emb'\)"):  # fmt: skip
        _run(bad, out, path, info)
    assert not os.path.exists(out)


def test_its_own_rows_in_another_order_still_release(fitted, tmp_path):
    src, path, info = fitted
    table = pq.read_table(src)
    shuffled = str(tmp_path / "shuffled.parquet")
    pq.write_table(table.take(np.random.default_rng(1).permutation(table.num_rows)), shuffled)
    assert _run(shuffled, str(tmp_path / "rel"), path, info)["rows_out"] == 300


def test_a_spec_bound_to_ids_alone_is_refused(fitted):
    """An export written before the content was bound cannot tell other embeddings apart."""
    src, _, info = fitted
    spec = dict(info["modifier"]["spec"])
    assert spec["fit_rows_sha256"] == rows_digest(*(lambda d: (d.ids, d.x))(load_embeddings(src)))
    spec.pop("fit_rows_sha256")
    old = {**info, "modifier": {**info["modifier"], "spec": spec}}
    with pytest.raises(TransductiveRowsError, match=r"bound to its rows' ids alone.*Re-train"):
        check_fitted_rows(old, src, id_col="id")
