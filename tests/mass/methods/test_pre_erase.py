"""Adaptive ``pre_erase``: a closed-form eraser fitted first, G trained on its output; the
result is one ``chain`` modifier that saves, loads and exports like any other."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mass.config import MassConfig
from mass.errors import ConfigError
from mass.methods import get_method
from mass.methods._common import subset, toy_dataset
from mass.modifiers import ChainModifier, load_modifier, save_modifier


@pytest.fixture(scope="module")
def fitted():
    full = toy_dataset(500, seed=11)
    tr, te = subset(full, np.arange(400)), subset(full, np.arange(400, 500))
    params = {"mode": "adaptive", "epochs": 2, "branch_epochs": 2, "agnostic_epochs": 2,
              "batch_size": 64, "w_rstar": 0,
              "adaptive": {"pre_erase": "quadratic", "output_noise": 0.1}}  # fmt: skip
    res = get_method("mass").fit(tr, suppress=["a"], preserve=["b"], params=params,
                                 progress=False)  # fmt: skip
    return res, tr, te


def test_pre_erase_gives_eraser_then_g(fitted):
    res, tr, _ = fitted
    m = res.modifier
    assert isinstance(m, ChainModifier)
    assert [p.kind for p in m.parts] == ["quadratic_erasure", "mass"]
    assert m.stochastic and m.spec.dim == tr.x.shape[1]
    x, seeds = torch.as_tensor(tr.x[:20]), torch.arange(20)
    with torch.no_grad():
        expect = m.parts[1](m.parts[0](x, seeds), seeds)
        assert torch.equal(m(x, seeds), expect)


def test_chain_round_trips_through_save_and_export(fitted, tmp_path):
    from mass.serving.export import export_modifier

    res, tr, _ = fitted
    run = tmp_path / "run"
    run.mkdir()
    save_modifier(res.modifier, str(run / "modifier.pt"), method="mass", suppress=["a"],
                  preserve=["b"], config_hash="h")  # fmt: skip
    again = load_modifier(str(run / "modifier.pt"))
    x, seeds = torch.as_tensor(tr.x[:50]), torch.arange(50)
    with torch.no_grad():
        assert torch.equal(again(x, seeds), res.modifier(x, seeds))
    import json

    res_export = export_modifier(run, tmp_path / "repo", "chained")
    info = json.loads((res_export.version_dir / "export.json").read_text())
    assert info["kind"] == "chain" and info["dim"] == tr.x.shape[1] and info["stochastic"]


def test_unknown_pre_eraser_is_a_config_error():
    with pytest.raises(ConfigError, match="pre_erase"):
        MassConfig.from_dict({"mode": "adaptive", "adaptive": {"pre_erase": "pca"}},
                             suppress=["a"]).validate({"a": np.array([0, 1, 0, 1])})  # fmt: skip
