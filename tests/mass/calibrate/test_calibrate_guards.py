"""Calibration's per-attribute audit row (``ValidationAudit.report``) is judged at the
gate's confidence widened for the release, the same ``ValidationAudit.confidence`` the
search reads, not at the policy's 95 % (issue 37)."""

from __future__ import annotations

import pytest

from mass.audit.policy import AuditPolicy
from mass.calibrate.judge import ValidationAudit
from mass.config import CalibrationConfig
from mass.metrics.scores import wilson_upper, z_value
from mass.synthetic import make_synthetic


def test_report_audits_at_the_widened_confidence():
    ds = make_synthetic(n=120, dim=6, s_classes=2, u_classes=2, seed=3)
    pol = AuditPolicy(confidence=0.95, families=("logreg",), folds=3)
    audit = ValidationAudit(ds, ["s"], [], pol, CalibrationConfig())
    assert audit.confidence > 0.95
    rep = audit.report(ds.x, "s", "suppressed", ("logreg",))
    assert rep.confidence == pytest.approx(audit.confidence)
    # the upper bounds are the widened ones: wider than a 95 % Wilson bound on the same rows
    correct, n = rep.attackers["logreg"] * rep.n, rep.n
    high = rep.ci_high["logreg"]
    assert high == pytest.approx(wilson_upper(correct, n, z_value(audit.confidence)))
    assert high > wilson_upper(correct, n, z_value(0.95)) + 1e-6
