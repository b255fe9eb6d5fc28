"""Every method of `mass bench compare` exports to Triton and runs through the same anonymize
job unchanged: one repository, one real tritonserver, one job per method, and each release
equals the method's in-process modifier on the same rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from beam_pipelines import anonymize
from bench.compare import METHOD_ROWS
from mass.keys import NOISE_KEY_ENV, resolve_key
from mass.methods import get_method
from mass.methods._common import subset, toy_dataset
from mass.modifiers import save_modifier
from mass.noise import release_row_seeds

pytestmark = [pytest.mark.triton, pytest.mark.slow]
ROWS = [(label, method, {**params, **quick}) for label, method, params, quick in METHOD_ROWS]
ROWS.append(("mass adaptive + pre-erasure", "mass",
             {"mode": "adaptive", "epochs": 2, "branch_epochs": 2, "agnostic_epochs": 2,
              "adaptive": {"pre_erase": "quadratic", "output_noise": 0.03}}))  # fmt: skip


def _name(label: str) -> str:
    return "m_" + "".join(c if c.isalnum() else "_" for c in label)


@pytest.fixture(scope="module")
def served(tmp_path_factory, triton_server_factory):
    from mass.serving.export import export_modifier

    base = tmp_path_factory.mktemp("every_method")
    full = toy_dataset(400, dim=16, seed=5)
    train, rest = subset(full, np.arange(300)), subset(full, np.arange(300, 400))
    torch.manual_seed(0)
    models = {}
    for label, method, params in ROWS:
        fit = get_method(method).fit(train, suppress=["a"], preserve=["b"], params=params,
                                     seed=0, progress=False)  # fmt: skip
        run = base / _name(label)
        run.mkdir()
        save_modifier(fit.modifier.eval(), str(run / "modifier.pt"), method=method,
                      suppress=["a"], preserve=["b"], config_hash=label)  # fmt: skip
        export_modifier(run, base / "repo", _name(label))
        models[label] = fit.modifier.eval()
    src = base / "input.parquet"
    emb = pa.FixedSizeListArray.from_arrays(pa.array(rest.x.astype(np.float32).ravel()), 16)
    pq.write_table(pa.table({"id": rest.ids, "emb": emb}), src)
    return base, src, rest, models, triton_server_factory(base / "repo")


@pytest.mark.parametrize("label", [r[0] for r in ROWS])
def test_method_runs_through_the_anonymize_job_unchanged(served, label, tmp_path):
    base, src, rest, models, server = served
    out = str(tmp_path / "release")
    summary = anonymize.run(["--input", str(src), "--output", out, "--model", _name(label),
                             "--repository", str(base / "repo"), "--triton-url", server.grpc_url,
                             "--batch-rows", "64", "--no-audit"])  # fmt: skip
    assert summary["rows_out"] == len(rest)
    rel = pq.read_table(out).sort_by("id")
    assert rel.column("id").to_pylist() == sorted(rest.ids.to_pylist())
    assert rel.schema.metadata[b"mass.model"] == _name(label).encode()
    order = np.argsort(rest.ids.to_numpy())
    x = torch.as_tensor(rest.x[order].astype(np.float32))
    with torch.no_grad():
        seeds = release_row_seeds(rest.ids.take(pa.array(order)), resolve_key(None, NOISE_KEY_ENV),
                                  rel.schema.metadata)  # fmt: skip
        ref = models[label](x, torch.as_tensor(seeds)).numpy()
    got = np.stack(rel.column("emb").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, ref, atol=1e-5)
