"""Fixtures for the fail-closed suite: a real model repository, deliberately broken models,
one shared Triton server (started only by the tests that need it) and byte snapshots."""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass.embeddings import embedding_array

DIM = 16
ROWS = 600

# A python-backend model.py that misbehaves on purpose (same bootstrap as `mass export`).
BROKEN_MODEL_PY = """import os, site, sys, time
_before = list(sys.path)
for _folder in [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]:
    site.addsitedir(_folder)
sys.path[:] = [p for p in sys.path if p not in _before] + _before
import numpy as np
import triton_python_backend_utils as pb_utils

FAULT = "{fault}"


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "EMBEDDING").as_numpy()
            if FAULT == "wrong_shape":
                y = np.zeros((len(x), x.shape[1] + 1), np.float32)
            elif FAULT == "wrong_dtype":
                y = x.astype(np.float64) + 1.0
            elif FAULT == "nan":
                y = np.full(x.shape, np.nan, np.float32)
            elif FAULT == "bypass":
                y = np.array(x, np.float32)
            elif FAULT == "slow":
                time.sleep(2.0)
                y = np.array(x, np.float32) + 1.0
            out = pb_utils.Tensor("PRIVATIZED", y)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""
BROKEN = {  # fault -> (output data type, output dims) declared in config.pbtxt
    "wrong_shape": ("TYPE_FP32", "-1"),  # honest config, so Triton passes it to the client
    "wrong_dtype": ("TYPE_FP64", str(DIM)),
    "nan": ("TYPE_FP32", str(DIM)),
    "bypass": ("TYPE_FP32", str(DIM)),
    "slow": ("TYPE_FP32", str(DIM)),
}


def write_broken_model(repo: Path, fault: str) -> None:
    """``repo/<fault>/1/model.py`` + config + export.json, checksummed like a real export."""
    from mass.digest import sha256_file
    from mass.serving.contract import SHA256_PARAMETER, version_parameter
    from mass.serving.manifest import sign_version_dir, signing_key

    dtype, dims = BROKEN[fault]
    version = repo / fault / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(BROKEN_MODEL_PY.format(fault=fault))
    sha = sha256_file(version / "model.py")
    meta = {"name": fault, "version": 1, "sha256": sha, "weights": "model.py", "dim": DIM,
            "method": "broken", "suppress": ["digit"], "preserve": [], "config_hash": "x"}  # fmt: skip
    (version / "export.json").write_text(json.dumps(meta))
    (repo / fault / "config.pbtxt").write_text(f'''name: "{fault}"
backend: "python"
max_batch_size: 512
input [
  {{ name: "EMBEDDING" data_type: TYPE_FP32 dims: [ {DIM} ] }},
  {{ name: "ROW_SEED" data_type: TYPE_INT64 dims: [ 1 ] }}
]
output [ {{ name: "PRIVATIZED" data_type: {dtype} dims: [ {dims} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "{SHA256_PARAMETER}" value: {{ string_value: "{sha}" }} }}
parameters {{ key: "{version_parameter(1)}" value: {{ string_value: "{sha}" }} }}
''')
    (version / "__pycache__").write_bytes(b"")  # as `mass export` does: no .pyc cache
    sign_version_dir(version, signing_key())  # signed like a real export (the session key)


def export_mod(run: Path, repo: Path, *, seed: int, name: str = "mod") -> None:
    import torch

    from mass.modifiers import DataModifier, ModifierSpec, save_modifier
    from mass.serving.export import export_modifier

    torch.manual_seed(seed)
    run.mkdir(parents=True, exist_ok=True)
    model = DataModifier(ModifierSpec(DIM, hidden=(32,), noise_dim=4))
    save_modifier(model, str(run / "modifier.pt"), method="mass", suppress=["digit"],
                  preserve=["parity"], config_hash=f"h{seed}")  # fmt: skip
    export_modifier(run, repo, name, max_batch_size=512)


@pytest.fixture(scope="session")
def fc_repo(tmp_path_factory) -> Path:
    """``repo``: the good modifier ``mod`` and every broken model; ``other``: another ``mod``."""
    base = tmp_path_factory.mktemp("failclosed")
    export_mod(base / "run", base / "repo", seed=0)
    for fault in BROKEN:
        write_broken_model(base / "repo", fault)
    export_mod(base / "run_other", base / "other", seed=1)  # same name, different weights
    return base


@pytest.fixture(scope="session")
def fc_server(fc_repo, triton_server_factory):
    """One real tritonserver for the whole suite (torn down by the session factory)."""
    return triton_server_factory(fc_repo / "repo")


def write_input(
    path: str | Path,
    *,
    rows: int = ROWS,
    dim: int = DIM,
    seed: int = 0,
    row_group: int = 200,
    id_offset: int = 0,
    **columns,
) -> pa.Table:
    """id, emb (fixed-size float32), digit, parity, image (uint8 list), note; overrides by
    keyword (``emb=pa.array(...)``, ``id=...``; ``None`` drops a column)."""  # fmt: skip
    rng = np.random.default_rng(seed)
    digit = rng.integers(0, 10, rows)
    cols = {
        "id": pa.array(np.arange(rows, dtype=np.int64) + id_offset),
        "emb": embedding_array(rng.normal(size=(rows, dim)).astype(np.float32)),
        "digit": pa.array(digit),
        "parity": pa.array(digit % 2),
        "image": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.integers(0, 256, rows * 4).astype(np.uint8)), 4
        ),
        "note": pa.array([f"n{i}" for i in range(rows)]),
    }
    for k, v in columns.items():
        if v is None:
            cols.pop(k, None)
        else:
            cols[k] = v
    table = pa.table(cols)
    pq.write_table(table, str(path), row_group_size=row_group)
    return table


def snapshot(directory: str | Path) -> dict[str, bytes]:
    """Every file under ``directory`` -> its bytes (empty when it does not exist)."""
    out = {}
    for f in sorted(glob.glob(os.path.join(str(directory), "**", "*"), recursive=True)):
        if os.path.isfile(f):
            out[os.path.relpath(f, directory)] = Path(f).read_bytes()
    return out


def fake_previous_release(out: Path) -> dict[str, bytes]:
    """A stand-in previous release (a Parquet part + our _release.json marker, so the job may
    replace it) whose bytes must survive a failed run."""
    from mass.release.manifest import write_release_manifest

    out.mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2], "note": ["previous", "release"]}),
                   str(out / "part-00000-of-00001.parquet"))  # fmt: skip
    write_release_manifest(str(out), audit=None)
    return snapshot(out)


def leftovers(out: Path) -> list[str]:
    """Staging/displaced directories next to ``out`` (must be none after any run)."""
    return sorted(p.name for p in out.parent.glob(f"{out.name}.*-*"))


def mass_command(argv: list[str]) -> int:
    """Run a ``mass`` subcommand in-process like :func:`mass.cli.main`, but let the
    :class:`mass.errors.MassError` propagate so the test sees the exact class."""
    from mass.cli import parse_command, run_command

    return run_command(*parse_command(argv))


def run_script(code: str, *args: str, **kw):
    """``python -c code args`` with this interpreter (subprocess-based crash tests)."""
    import subprocess

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, **kw)


def requests_served(server, model: str = "mod") -> float:
    """Successful inference requests of ``model`` so far (the server's Prometheus metrics)."""
    import urllib.request

    try:
        text = urllib.request.urlopen(server.metrics_url, timeout=2).read().decode()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("nv_inference_request_success") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="session")
def fc():
    """This module's helpers (test modules cannot import a conftest under importlib mode)."""
    return sys.modules[__name__]
