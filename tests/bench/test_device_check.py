"""bench/device_check.py: what it calls a difference, and its check run end to end on the CPU
(the GPU machine runs the same code with cuda added; docs/performance.md "On a GPU")."""

from __future__ import annotations

import json

import numpy as np
import torch

from bench import device_check as dc
from mass.modifiers import (
    AffineModifier,
    AffineSpec,
    GaussianNoiseModifier,
    NoiseSpec,
    save_modifier,
)


def test_compare_names_a_moved_row_and_a_vector_that_is_no_cell():
    ref = np.repeat(np.eye(3, dtype=np.float32), 4, axis=0)  # 3 cells, 4 rows each
    y = ref.copy()
    y[0] = ref[4]  # a row released as another cell's vector
    y[1] = 0.5  # a vector that names no cell
    got = dc.compare(y, ref, cells=True)
    assert got["distinct_ref"] == 3 and got["distinct"] == 4
    assert got["foreign_vectors"] == 1
    assert got["moved_rows"] == 2 / 12 and got["rows_equal"] == 10 / 12
    same = dc.compare(ref, ref, cells=True)
    assert same["max_abs"] == 0 and same["foreign_vectors"] == 0 and same["moved_rows"] == 0


def test_check_reads_a_prepared_folder_and_reports_the_cpu_against_its_reference(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    seeds = np.arange(300, dtype=np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "seeds.npy", seeds)
    models = {"affine": AffineModifier(AffineSpec(dim=8)),
              "noise": GaussianNoiseModifier(NoiseSpec(dim=8, sigma=0.5))}  # fmt: skip
    for name, m in models.items():
        save_modifier(m, str(tmp_path / f"{name}.pt"))
        with torch.inference_mode():
            np.save(
                tmp_path / f"{name}.ref.npy", dc._apply(m.eval(), x, seeds, torch.device("cpu"))
            )
    prepared = {n: {"method": n, "kind": m.kind} for n, m in models.items()}
    (tmp_path / "prepared.json").write_text(json.dumps(
        {"rows": 300, "dim": 8, "torch": torch.__version__, "machine": "test",
         "models": prepared}))  # fmt: skip
    doc = dc.check(tmp_path, tmp_path / "out", batches=(64,), only=("affine", "noise"))
    saved = json.loads((tmp_path / "out" / "device_check.json").read_text())
    assert saved["models"].keys() == {"affine", "noise"} == doc["models"].keys()
    for row in saved["models"].values():
        assert row["cpu"]["max_abs"] == 0.0 and row["cpu"]["rows_equal"] == 1.0
        assert row["rows_per_s"]["64"]["cpu_1_threads"] > 0
    assert saved["models"]["noise"]["cpu"]["noise_max_abs"] == 0.0
    assert saved["models"]["affine"]["script"]["ok"] is True
