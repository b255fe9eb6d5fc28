"""Calibration under ``audit.gate_certificate`` (mass.calibrate.certified): only noise-free
cell candidates are tried, and one that passes validation is judged on its certificate where
the lookup at the release's shape released rows its cells never saw, at the gate's rows per
cell; the certificate ranks the passing ones; a refusal says what it read."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass import calibrate as C
from mass.audit.policy import AuditPolicy
from mass.calibrate import certified as G
from mass.calibrate.rank import rank_key
from mass.config import CalibrationConfig
from mass.embeddings import embedding_array
from mass.errors import CalibrationError
from mass.io import load_embeddings
from mass.metrics import AttributeReport
from mass.metrics.certificate import certify_cells


def test_rows_to_certify_hold_the_gates_rows_per_cell():
    # cells grow with the fit rows: a half fitted on 1,200 of the release model's 2,400 rows
    # has half its cells, so half the gate's 3,000 rows give the same rows per cell
    assert G.rows_to_certify(3000, 1200, 2400, counted=False) == 1500
    # a fixed cell count (the certified partition): the gate's rows themselves
    assert G.rows_to_certify(3000, 1200, 2400, counted=True) == 3000
    assert G.rows_to_certify(0, 10, 10, counted=True) == 1


def _halves(cells_of_row: np.ndarray, s: np.ndarray, dim: int = 3):
    """A release whose vector is its cell's code (one vector per cell), two halves."""
    x = np.repeat(cells_of_row[:, None].astype(np.float32), dim, axis=1)
    n = len(s)
    pairs = [(np.arange(n // 2, n), np.arange(n // 2)), (np.arange(n // 2), np.arange(n // 2, n))]
    return x, pairs


# the lookups' report as calibration has it: baselines 0.5 on both scales
REPORT = AttributeReport("s", "suppressed", 1000, majority=0.5, floor=0.0, original=0.9,
                         original_by_family={}, frozen_x=None, frozen_xprime=None,
                         attackers={}, margins={"lookup": 0.3, "lookup_balanced": 0.3},
                         chance=0.5)  # fmt: skip


def test_the_worse_halfs_certificate_is_judged_by_the_gates_rule_on_the_drawn_rows():
    rng = np.random.default_rng(0)
    n = 4000
    s = rng.integers(0, 2, n)
    cell = rng.integers(0, 4, n)  # four cells, S independent of the cell
    skewed = cell.copy()
    skewed[n // 2 :][s[n // 2 :] == 1] = 0  # the second half's class 1 all in cell 0
    for cells, ok in ((cell, True), (skewed, False)):
        x, pairs = _halves(cells, s)
        certs, over = G.certificates_at_release_shape(
            x, pairs, {"s": s}, ["s"], {"s": REPORT}, confidence=0.95, margins={"s": 0.1},
            release_rows=1000, n_fit=n, counted=True, seed=3)  # fmt: skip
        b = certs["s"]
        assert b["rows"] == 1000 and b["release_rows"] == 1000 and b["cells"] == 4
        assert b["within_limit"] is ok and bool(over) is not ok
        assert b["balanced_limit"] == pytest.approx(0.6)
        # by hand: the worse half, on the same seeded draw of 1,000 of its 2,000 rows
        draw = np.random.default_rng(3)
        worst = max(
            (certify_cells(cells[sub], s[sub])
             for sub in (np.sort(draw.choice(rows, 1000, replace=False)) for _, rows in pairs)),
            key=lambda c: c.balanced,
        )  # fmt: skip
        assert b["balanced"] == pytest.approx(worst.balanced, abs=1e-6)
    # plug-in (1 + 3 x 1/4) / 2 = 0.875 plus the Hoeffding term; the refusal names the rows such cells need
    assert 0.875 < b["balanced"] < 0.95 and "resolution_plan" in b
    assert "certified bound" in over[0] and "audited rows for 4 cells" in over[0]


def test_a_release_whose_vectors_do_not_name_cells_has_no_certificate_and_fails():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 2, 400)
    x, pairs = _halves(np.arange(400), s)  # a vector per row: continuous
    certs, over = G.certificates_at_release_shape(
        x, pairs, {"s": s}, ["s"], {"s": REPORT}, confidence=0.95, margins={"s": 0.1},
        release_rows=200, n_fit=400, counted=False, seed=0)  # fmt: skip
    assert certs["s"]["certified"] is False and certs["s"]["within_limit"] is False
    assert over == [f"s: no certificate ({certs['s']['reason']})"]
    assert "continuous release" in over[0]
    assert G.worst_bound(certs) == 1.0


def test_the_certificate_ranks_passing_candidates_only_under_the_gate():
    pt = {"unnamed": {"utility": 0.5}, "fraction": 0.95, "fidelity": 0.5, "noise": 0.0}
    assert rank_key({**pt, "certificate": 0.55}) > rank_key({**pt, "certificate": 0.60})
    # utility nobody named still comes first
    more = {**pt, "unnamed": {"utility": 0.6}, "certificate": 0.70}
    assert rank_key(more) > rank_key({**pt, "certificate": 0.55})
    assert rank_key(pt)[1] == 0.0  # without the gate the term is absent


def _blobs(path, n=1200, seed=0) -> None:
    """u in well-separated class means, s independent noise: cells within u keep u."""
    rng = np.random.default_rng(seed)
    u, s = rng.integers(0, 3, n), rng.integers(0, 2, n)
    x = rng.normal(size=(n, 8)) * 0.3 + 3.0 * rng.normal(size=(3, 8))[u]
    pq.write_table(pa.table({"id": np.arange(n), "emb": embedding_array(x.astype(np.float32)),
                             "s": s, "u": u}), path)  # fmt: skip


@pytest.mark.parametrize("margin", [0.12, 0.45])
def test_under_the_certificate_gate_only_cells_are_tried_and_judged_on_their_certificate(
    tmp_path, monkeypatch, margin
):
    """Under ``audit.gate_certificate`` the continuous candidates and the last resort are
    skipped (no certificate), the cell candidate is judged without noise and then on its
    certificate at the release's shape: at a margin no release of these rows can certify it
    fails there and the refusal says what it read; at a wide one it is chosen, its
    certificate recorded."""
    from mass.calibrate import search as S

    seen = []
    real = S.bisect_noise

    def bisect(*a, **kw):
        seen.append((kw["key_gate"], kw["certificate_gate"]))
        return real(*a, **kw)

    monkeypatch.setattr(S, "bisect_noise", bisect)
    _blobs(tmp_path / "b.parquet")
    ds = load_embeddings(str(tmp_path / "b.parquet"), label_cols=["s", "u"])
    by_name = {c.name: c for c in C.SEARCH_SPACE}
    space = (by_name["leace"], by_name["ot-repair+partition1|R"], by_name["leace|R+R-span"])
    policy = AuditPolicy(gate_key_compromised=False, gate_certificate=True,
                         attacker_margin=dict.fromkeys(AuditPolicy().families, margin),
                         frozen_margin=margin, families=("logreg", "knn"))  # fmt: skip
    out = tmp_path / "run"
    cfg = CalibrationConfig(budget_minutes=5)
    if margin < 0.2:
        with pytest.raises(CalibrationError):
            C.calibrate(ds, suppress=["s"], preserve=["u"], space=space, policy=policy,
                        cfg=cfg, out_dir=str(out))  # fmt: skip
    else:
        res = C.calibrate(ds, suppress=["s"], preserve=["u"], space=space, policy=policy,
                          cfg=cfg, out_dir=str(out))  # fmt: skip
        assert res.candidate.name == "ot-repair+partition1|R" and res.noise == 0.0
    rep = json.loads((out / "calibration.json").read_text())
    leace, cells, last = rep["candidates"]
    assert rep["order"] == S.CERTIFIED_ONLY
    for c in (leace, last):
        assert c["status"] == "skipped" and c["reason"] == G.GATED_SKIP
    assert seen == [(False, True)]  # the cell candidate alone, judged without noise
    assert [p["noise"] for p in cells["points"]] == [0.0]
    cert = cells["release_shape"]["certificate"]["s"]
    # out of fold on 1,200 rows: the release model fits them all, each half 600, and the
    # gate audits the 1,200 validated rows: 600 rows per half hold as many rows per cell
    assert cert["release_rows"] == 1200 and cert["rows"] == 600 and cert["certified"]
    if margin < 0.2:
        assert cells["status"] == "failed", cells
        assert "fails audit.gate_certificate" in cells["reason"]
        assert cert["within_limit"] is False and cert["resolution_plan"]["rows_needed"] > 600
        assert "under audit.gate_certificate only noise-free cell candidates were tried: the " \
               "best certificate at the release's shape was ot-repair+partition1|R's" \
               in rep["verdict"]  # fmt: skip
        plan = cert["resolution_plan"]
        assert (f"its {cert['cells']} cells (one half's) would need about "
                f"{plan['rows_needed']:,} audited rows") in rep["verdict"]  # fmt: skip
    else:
        assert cells["status"] == "passed" and cert["within_limit"] is True
        assert rep["chosen"]["certificate"] == pytest.approx(cert["balanced"])
