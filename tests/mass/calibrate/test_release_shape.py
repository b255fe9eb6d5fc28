"""A cell candidate that passes out of fold is judged once more by the lookups on released
values, on releases that hold as many rows per cell as the release will
(mass.calibrate.validation.release_shaped_folds): the search's four fold models each
release a quarter of the rows into cells fitted on three quarters, a third of the release's
rows per cell, and their lookups under-read the release's (on the realdata `twoyear` set
validation read 0.416 where the gate read 0.460 against 0.449; docs/calibration.md, "The
lookup at the release's shape")."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mass import calibrate as C
from mass.audit.policy import AuditPolicy
from mass.calibrate.validation import release_shaped_folds
from mass.config import CalibrationConfig
from mass.errors import CalibrationError
from mass.methods._common import toy_dataset
from mass.rows import normalize_rows

CELL_ROWS = 10
CELLS = C.Candidate("cells", "fake_cells", {"cell_rows": CELL_ROWS})  # a cell release
PLAIN = C.Candidate("plain", "fake_plain", {})  # continuous: no check


class _Bins(torch.nn.Module):
    """Cells of equal fitted rows along coordinate ``axis`` (one per ``CELL_ROWS`` fitted rows);
    every row of a cell is released as the same vector."""

    def __init__(self, edges: np.ndarray, dim: int, axis: int):
        super().__init__()
        self.edges, self.dim, self.axis = torch.from_numpy(edges), dim, axis

    def forward(self, x, seeds):
        cell = torch.bucketize(x[:, self.axis].contiguous(), self.edges)
        out = torch.zeros(len(x), self.dim)
        out[:, 0] = cell.float() / (len(self.edges) + 1)
        out[:, 1] = 1.0
        return out


class _Method:
    def __init__(self, axis: int, fits: list[int]):
        self.axis, self.fits = axis, fits

    def fit(self, ds, suppress, preserve, params, seed, progress):
        self.fits.append(len(ds))
        v = np.sort(normalize_rows(ds.x)[:, self.axis])
        cells = max(2, len(ds) // int(params.get("cell_rows", CELL_ROWS)))
        edges = v[(np.arange(1, cells) * len(v)) // cells].astype(np.float32)
        return SimpleNamespace(modifier=_Bins(edges, ds.x.shape[1], self.axis), extra={})


@pytest.fixture
def setup(monkeypatch, every_candidate_passes):
    """2,000 rows; s lives in coordinate 0 alone (bins along it are S-pure), u elsewhere.
    Every candidate passes the out-of-fold judging (the four fold models' releases)."""
    ds = toy_dataset(2000, dim=8, classes={"s": 2, "u": 3}, seed=5)
    rng = np.random.default_rng(0)
    ds.x[:, 0] = np.where(ds.labels["s"] == 1, 5.0, -5.0) + rng.normal(size=len(ds)) * 0.1
    ds.x[:, 1] = rng.normal(size=len(ds)) * 3.0  # S-free: bins along it hold S at chance
    fits: list[int] = []
    axis = {"axis": 0}

    def get_method(name):
        return _Method(axis["axis"], fits)

    import mass.methods

    monkeypatch.setattr(mass.methods, "get_method", get_method)
    return ds, fits, axis


def _calibrate(ds, space, out_dir=None, **cfg):
    return C.calibrate(ds, suppress=["s"], preserve=["u"], space=space, out_dir=out_dir,
                       policy=AuditPolicy(families=("logreg", "knn"),
                                          gate_key_compromised=True),
                       cfg=CalibrationConfig(budget_minutes=5, **cfg))  # fmt: skip


def test_cells_whose_lookup_reads_s_at_the_release_shape_are_refused(setup, tmp_path):
    ds, fits, _ = setup
    with pytest.raises(CalibrationError):
        _calibrate(ds, (CELLS,), out_dir=str(tmp_path))
    entry = json.loads((tmp_path / "calibration.json").read_text())["candidates"][0]
    assert entry["status"] == "failed", entry
    assert "shaped like the release's" in entry["reason"] and "lookup" in entry["reason"], entry
    shape = entry["release_shape"]
    assert not shape["passed"] and shape["how"].startswith("2 models"), shape
    # a release as large as the training rows: each half's cells hold ~CELL_ROWS rows
    assert CELL_ROWS * 0.8 <= shape["rows_per_cell"] <= CELL_ROWS * 1.25, shape
    assert shape["lookups"]["s"]["lookup"]["accuracy"] > 0.95
    for judge in shape["lookups"]["s"].values():  # each reading beside its limits
        within = (judge["ci_high"] <= judge["limit"]
                  and judge["balanced_ci_high"] <= judge["balanced_limit"])  # fmt: skip
        assert judge["ok"] == within and 0.5 <= judge["limit"] < 0.75, judge
    # four fold fits on 3/4 of the rows, then two on halves
    assert fits == [1500] * 4 + [1000] * 2, fits


def test_with_held_out_validation_rows_the_cells_are_judged_at_the_release_shape_too(
    setup, tmp_path
):  # fmt: skip
    """``--val`` (or a holdout, past 16,000 rows): the release model is the one fitted on the
    training rows, judged on other rows' release, whose cells hold as many rows as the
    validation rows are few. The lookups are judged again on halves of the training rows."""
    ds, fits, _ = setup
    from mass.methods._common import subset

    train, val = subset(ds, np.arange(1500)), subset(ds, np.arange(1500, 2000))
    with pytest.raises(CalibrationError):
        C.calibrate(train, val=val, suppress=["s"], preserve=["u"], space=(CELLS,),
                    out_dir=str(tmp_path),
                    policy=AuditPolicy(families=("logreg", "knn"), gate_key_compromised=True),
                    cfg=CalibrationConfig(budget_minutes=5))  # fmt: skip
    entry = json.loads((tmp_path / "calibration.json").read_text())["candidates"][0]
    assert entry["status"] == "failed" and not entry["release_shape"]["passed"], entry
    assert fits == [1500, 750, 750], fits  # the release model, then two halves


def test_cells_independent_of_s_pass_the_release_shape_and_are_chosen(setup):
    ds, fits, axis = setup
    axis["axis"] = 1
    res = _calibrate(ds, (PLAIN, CELLS))
    plain, cells = res.report["candidates"]
    assert "release_shape" not in plain  # a continuous release: no lookup to judge
    shape = cells["release_shape"]
    assert shape["passed"] and cells["status"] == "passed", cells
    # the lookup reads chance; its bound is within the strictest family's limit
    assert shape["lookups"]["s"]["lookup"]["ok"] and shape["lookups"]["s"]["lookup_balanced"]["ok"]
    assert abs(shape["lookups"]["s"]["lookup"]["accuracy"] - 0.5) < 0.06, shape


@pytest.mark.parametrize("release_rows, projected", [
    (2000, False),  # as many as the training rows: halves hold the release's rows per cell
    (1000, False),  # half: halves hold twice its rows per cell (over-read, the safe side)
    (667, False),  # a third: three times
    (6000, True),  # more than the training rows: halves, the bounds projected
])  # fmt: skip
def test_the_release_shaped_folds_hold_at_least_the_rows_per_cell_of_the_release(
        release_rows, projected):  # fmt: skip
    from mass.calibrate.sampling import fold_indices
    from mass.metrics import growth

    n = 2000
    strata = np.arange(n) % 4
    s = SimpleNamespace(train=np.zeros(n), strata=strata, folds=fold_indices(strata, 4, 0),
                        policy=AuditPolicy(folds=10),
                        cfg=CalibrationConfig(release_rows=release_rows))  # fmt: skip
    pairs, how, project = release_shaped_folds(s, n)
    # always two models: more folds (a third of the rows per model for a release of half the
    # training rows) under-read twoyear's cells within R against the gate
    assert how.startswith("2 models") and len(pairs) == 2, how
    released = np.concatenate([rows for _, rows in pairs])
    assert sorted(released) == list(range(n))  # each row released once
    for fit_rows, rows in pairs:
        assert not np.intersect1d(fit_rows, rows).size  # never by a model fitted on it
        # rows per cell of a model fitted on fit_rows: at least the release's
        assert len(rows) / len(fit_rows) >= min(1.0, release_rows / n) * 0.98
    # the lookups are projected to the training rows whose rows per cell are the gate's
    # attackers' (9/10 of the release, cells of an n-row fit): within each half a table
    # trained on t rows has 2 t / n of them per fitted row per cell
    assert project * 2 / n == pytest.approx(0.9 * release_rows / n)
    trained = growth.trained_rows(n, 10, np.repeat([0, 1], n // 2))
    assert (growth.factor(trained, project) > 0) == projected


def test_the_wilson_and_balanced_bounds_at_a_scaled_z_are_those_of_fewer_rows():
    """The identity the release-shape lookups rest on: a bound on n rows at z sqrt(n / m) is
    the bound on m rows at z with the same rates (Wilson; the balanced bound per class)."""
    from mass.metrics.scores import balanced_upper, wilson_upper

    n, m, z = 6000, 1500, 1.96
    wide = z * np.sqrt(n / m)
    assert wilson_upper(1740, n, wide) == pytest.approx(wilson_upper(435, m, z), rel=1e-12)
    y = np.repeat([0, 1, 2], [3000, 2000, 1000])
    pred = np.where(np.arange(n) % 5 == 0, (y + 1) % 3, y)  # every fifth row wrong
    quarter = np.arange(n) % 4 == 0  # the same per-class counts, scaled by a quarter
    assert balanced_upper(y, pred, wide) == pytest.approx(
        balanced_upper(y[quarter], pred[quarter], z), rel=1e-9
    )


def test_the_release_shape_lookups_are_as_wide_as_the_gates_on_a_smaller_release(setup):
    """Where the gate audits fewer rows than the training rows the check releases (m < n),
    the lookups' bounds are validation's for (n, m): as wide as the gate's on m rows. The
    validation audit's own rows (here 500 of the 2,000) do not set them: sized for those,
    the check's bounds were narrower than the gate's on its m rows (docs/calibration.md,
    "The lookup at the release's shape")."""
    from mass.calibrate.judge import ValidationAudit, norm_cdf, validation_z
    from mass.methods._common import subset
    from mass.metrics import attribute_report, z_value

    ds, _, _ = setup
    x = normalize_rows(ds.x)
    y = ds.labels["s"]
    xp = np.zeros_like(x)  # 40 cells along the S-free coordinate, S at chance within them
    xp[:, 0] = np.digitize(x[:, 1], np.quantile(x[:, 1], np.linspace(0, 1, 41)[1:-1]))
    groups = np.arange(len(x)) % 2
    policy = AuditPolicy(families=("logreg", "knn"), gate_key_compromised=True)
    bounds = {}
    for rows in (None, 300):
        audit = ValidationAudit(subset(ds, np.arange(500)), ["s"], ["u"], policy,
                                CalibrationConfig(release_rows=rows))  # fmt: skip
        rep = audit.lookups(x, xp, ds.labels, groups)["s"]
        bounds[rows] = (rep.ci_high["lookup"], rep.balanced_ci_high["lookup_balanced"])
    assert bounds[300][0] > bounds[None][0] + 0.01 and bounds[300][1] > bounds[None][1] + 0.01
    conf = 2 * norm_cdf(validation_z(z_value(0.95), len(x), 300)) - 1
    want = attribute_report("s", y, x, xp, role="suppressed", preserved={"u": ds.labels["u"]},
                            margins=0.05, families=(), folds=audit.folds, seed=audit.cfg.seed,
                            confidence=conf, curve=False, original=audit.base.original["s"],
                            groups=groups)  # fmt: skip
    assert bounds[300] == (
        pytest.approx(want.ci_high["lookup"]),
        pytest.approx(want.balanced_ci_high["lookup_balanced"]),
    )
