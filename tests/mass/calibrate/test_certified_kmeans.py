"""calibrate: the k-means cells at a certifiable count (``ot-repair+kmeans-certified|R``):
its cells follow the rows the gate will audit, as the certified partition's do, and rows
that certify fewer cells than one centre per class of R skip it before any fit."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from mass import calibrate as C
from mass.audit.policy import AuditPolicy
from mass.calibrate.space import SEARCH_SPACE, certified_cell_count, ordered
from mass.config import CalibrationConfig
from mass.errors import CalibrationError
from mass.io import EmbeddingDataset, LabelEncoding

NAME = "ot-repair+kmeans-certified|R"


def _ring(n: int = 900, seed: int = 0) -> EmbeddingDataset:
    """s in the radius of two coordinates (no linear signal), u (3 classes) in class means."""
    rng = np.random.default_rng(seed)
    u, s = rng.integers(0, 3, n), rng.integers(0, 2, n)
    x = rng.normal(size=(n, 16)) * 0.4 + rng.normal(size=(3, 16))[u]
    th = rng.uniform(0, 2 * np.pi, n)
    r = np.where(s == 1, 1.0, 0.3)
    x[:, 0], x[:, 1] = r * np.cos(th), r * np.sin(th)
    return EmbeddingDataset(
        ids=pa.array(np.arange(n, dtype=np.int64)), x=x.astype(np.float32),
        labels={"s": s.astype(np.int64), "u": u.astype(np.int64)},
        encodings={"s": LabelEncoding("s", (0, 1)), "u": LabelEncoding("u", (0, 1, 2))},
        source="ring",
    )  # fmt: skip


def _entry(ds, rows: int | None, out) -> dict:
    cand = next(c for c in SEARCH_SPACE if c.name == NAME)
    try:
        C.calibrate(ds, suppress=["s"], preserve=["u"], policy=AuditPolicy(), space=(cand,),
                    cfg=CalibrationConfig(budget_minutes=5, release_rows=rows),
                    out_dir=str(out))  # fmt: skip
    except CalibrationError:
        pass  # passing or not, calibration.json records what the candidate was fitted with
    (entry,) = json.loads((out / "calibration.json").read_text())["candidates"]
    return entry


def test_kmeans_certified_cells_are_a_candidate_before_the_certified_partition():
    cand = next(c for c in SEARCH_SPACE if c.name == NAME)
    assert cand.certified_cells and cand.method == "ot_repair"
    assert cand.params.get("cells_by_preserved") and not cand.params.get("cell_axes")
    names = [c.name for c in ordered(SEARCH_SPACE, ["u"])]
    assert names.index(NAME) < names.index("ot-repair+certified|R")
    assert NAME not in [c.name for c in ordered(SEARCH_SPACE, [])]  # cells by R need an R


@pytest.mark.parametrize("rows", [5000, 60_000])
def test_kmeans_certified_cells_follow_the_rows_the_gate_will_audit(rows, tmp_path):
    ds = _ring()
    entry = _entry(ds, rows, tmp_path)
    want = certified_cell_count(ds.labels, ["s"], AuditPolicy(), rows)
    assert want >= 3
    assert entry["status"] in ("passed", "failed"), entry  # fitted and judged
    assert entry["params"]["cell_count"] == want, entry["params"]


def test_kmeans_certified_cells_are_skipped_below_one_centre_per_class_of_r(tmp_path):
    ds = _ring()
    pol = AuditPolicy()
    rows = next(
        r for r in range(1000, 5000, 20) if certified_cell_count(ds.labels, ["s"], pol, r) == 2
    )
    entry = _entry(ds, rows, tmp_path)
    assert entry["status"] == "skipped" and "has at least 3" in entry["reason"], entry
    entry = _entry(ds, None, tmp_path)  # the 900 validated rows certify no two cells
    assert entry["status"] == "skipped" and "certify no two cells" in entry["reason"], entry
