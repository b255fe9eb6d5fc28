"""Calibration ranks the candidates that pass by the utility nobody named: at equal privacy
and named utility, a candidate that keeps a watch attribute (or, unlabelled, the structure
within S) is chosen over one that keeps only R's span, and audit.watch_min_kept fails one
that loses it."""

from __future__ import annotations

import pytest

from mass import calibrate as C
from mass.audit.policy import AuditPolicy
from mass.config import CalibrationConfig
from mass.errors import CalibrationError
from mass.methods._common import toy_dataset

R_SPAN = C.Candidate("R-span", "leace_project")  # the last resort's method, tried first here
# (both continuous: without the key gate, under which only the first would be tried, a probe)
LEACE = C.Candidate("leace", "leace_iterated", {"given_preserved": False, "rounds": 1})


@pytest.fixture
def equal_privacy(every_candidate_passes):
    """Every candidate passes at noise 0 with the same privacy and named-utility numbers."""
    return toy_dataset(800, dim=16, classes={"s": 2, "u": 3, "w": 3}, seed=4)


@pytest.mark.parametrize("watch", [["w"], []])
def test_the_candidate_keeping_unnamed_utility_wins_at_equal_privacy(equal_privacy, watch):
    res = C.calibrate(equal_privacy, suppress=["s"], preserve=["u"], watch=watch,
                      policy=AuditPolicy(families=("logreg", "knn"), gate_key_compromised=False),
                      cfg=CalibrationConfig(budget_minutes=5), space=(R_SPAN, LEACE))  # fmt: skip
    r_span, leace = res.report["candidates"]
    assert res.candidate.name == "leace"
    assert leace["unnamed"]["utility"] > 0.9
    assert r_span["unnamed"]["utility"] < leace["unnamed"]["utility"] - 0.3
    assert res.report["chosen"]["unnamed"]["by"] == ("watch" if watch else "structure")
    assert not res.report["stopped"].startswith("early: R-span")  # it keeps too little


def test_watch_min_kept_fails_a_candidate_that_loses_the_watch_attribute(equal_privacy):
    policy = AuditPolicy(families=("logreg", "knn"), watch_min_kept=0.8, gate_key_compromised=False)
    with pytest.raises(CalibrationError):
        C.calibrate(equal_privacy, suppress=["s"], preserve=["u"], watch=["w"], policy=policy,
                    cfg=CalibrationConfig(budget_minutes=5), space=(R_SPAN,))  # fmt: skip
    res = C.calibrate(equal_privacy, suppress=["s"], preserve=["u"], watch=["w"], policy=policy,
                      cfg=CalibrationConfig(budget_minutes=5), space=(R_SPAN, LEACE))  # fmt: skip
    r_span = res.report["candidates"][0]
    assert r_span["status"] == "failed" and "watch_min_kept" in r_span["reason"]
    assert res.candidate.name == "leace"


def test_mass_train_refuses_a_watch_attribute_that_is_suppressed_or_missing(tmp_path, capsys):
    """`mass train --watch` names the attribute before any data is read in full."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mass.cli import main
    from mass.embeddings import embedding_array

    ds = toy_dataset(200, classes={"s": 2, "u": 3}, seed=1)
    data = tmp_path / "d.parquet"
    pq.write_table(pa.table({"id": ds.ids, "emb": embedding_array(ds.x), **ds.labels}), data)
    for watch, says in (("s", "also in --suppress"), ("zz", "'zz' is not a label column")):
        rc = main(["train", "--data", str(data), "--suppress", "s", "--preserve", "u",
                   "--watch", watch, "--out", str(tmp_path / watch)])  # fmt: skip
        assert rc == 2 and says in capsys.readouterr().err


def test_calibration_reads_a_watch_attribute_as_the_audit_does_frozen_reader_included():
    """A release that keeps the watch attribute only inside out (here every vector negated:
    retrained attackers read it as well as before) is read by the audit's frozen reader, a
    model of the original rows, below the majority rate; calibration's reading takes the
    lower of the two, so it ranks and fails candidates as the gate will read them."""
    from mass.calibrate.judge import ValidationAudit
    from mass.rows import normalize_rows

    ds = toy_dataset(600, dim=16, classes={"s": 2, "u": 3, "w": 3}, seed=4)
    audit = ValidationAudit(ds, ["s"], ["u"], AuditPolicy(families=("logreg",)),
                            CalibrationConfig(), watch=["w"])  # fmt: skip
    x = normalize_rows(ds.x)
    same, inside_out = audit.unnamed(x)["watch"]["w"], audit.unnamed(-x)
    w = inside_out["watch"]["w"]
    assert same["kept"] > 0.9 and same["frozen_kept"] > 0.9
    assert w["retrained_kept"] > 0.9  # retrained readers do not see the difference
    assert w["frozen_kept"] < 0.0 and w["kept"] == w["frozen_kept"]
    assert inside_out["utility"] == pytest.approx(w["kept"])
