"""A transductive repair (fitted on exactly the rows it releases) releases those rows and
refuses any other input before a row reaches the model (mass.fitrows)."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
import torch

from beam_pipelines import anonymize
from mass.errors import TransductiveRowsError
from mass.testing.stand_ins import transductive_repair, write_embeddings
from transforms.inference.function import FunctionModelHandler, TorchModifierFunction

DIM = 16


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(input the repair was fitted on, modifier.pt, model info as export.json records it)."""
    torch.set_num_threads(1)
    where = str(tmp_path_factory.mktemp("transductive"))
    return transductive_repair(where, rows=400, dim=DIM, row_group=150, steps=3, epochs=5)


def _run(src, out, path, info):
    handler = FunctionModelHandler(TorchModifierFunction(path), output_dim=DIM,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    argv = ["--input", src, "--output", out, "--model", "repair", "--no-audit"]
    return anonymize.run(argv, model_handler=handler, model_info=info)


def test_the_rows_it_was_fitted_on_are_released(fitted, tmp_path):
    src, path, info = fitted
    summary = _run(src, str(tmp_path / "rel"), path, info)
    assert summary["rows_out"] == 400
    assert pq.read_table(str(tmp_path / "rel")).num_rows == 400


@pytest.mark.parametrize("other", ["other ids", "fewer rows"])
def test_other_rows_are_refused_by_name_and_nothing_is_published(fitted, tmp_path, other):
    src, path, info = fitted
    bad = str(tmp_path / "other.parquet")
    if other == "other ids":  # as many rows, one id different
        write_embeddings(bad, rows=400, dim=DIM, id_offset=1)
    else:
        pq.write_table(pq.read_table(src).slice(0, 399), bad)
    out = str(tmp_path / "rel")
    with pytest.raises(TransductiveRowsError, match=r"other\.parquet: model 'repair'.*400 rows"):
        _run(bad, out, path, info)
    assert not os.path.exists(out)
