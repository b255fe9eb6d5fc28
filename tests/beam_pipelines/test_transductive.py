"""A transductive repair (fitted on exactly the rows it releases) releases those rows and
refuses any other input before a row reaches the model (mass.fitrows)."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
import torch

from beam_pipelines import anonymize
from mass.errors import TransductiveRowsError
from mass.io import load_embeddings
from mass.methods import get_method
from mass.modifiers import save_modifier
from mass.testing.stand_ins import write_embeddings
from transforms.inference.function import FunctionModelHandler, TorchModifierFunction

DIM = 16


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(input the repair was fitted on, modifier.pt, model info as export.json records it)."""
    torch.set_num_threads(1)
    where = tmp_path_factory.mktemp("transductive")
    src = str(where / "rows.parquet")
    write_embeddings(src, rows=400, dim=DIM, row_group=150)
    ds = load_embeddings(src, label_cols=["digit"])
    params = {"transductive": True, "steps": 3, "predictor_epochs": 5, "hidden": 0}
    fit = get_method("ot_repair").fit(ds, suppress=["digit"], preserve=[], params=params,
                                      progress=False)  # fmt: skip
    path = str(where / "modifier.pt")
    save_modifier(fit.modifier, path, method="ot_repair")
    info = {"name": "repair", "version": 1, "sha256": "abc", "method": "ot_repair",
            "suppress": ["digit"], "preserve": [], "config_hash": "h", "dim": DIM,
            "stochastic": False, "modifier": {"kind": fit.modifier.kind,
                                              "spec": fit.modifier.spec.to_dict()}}  # fmt: skip
    return src, path, info


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
