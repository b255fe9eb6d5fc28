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


@pytest.mark.parametrize("stopped, more", [("budget", True), ("search space exhausted", False),
                                           ("infeasible request", False)])  # fmt: skip
def test_a_refusal_advises_more_budget_only_when_the_budget_stopped_it(stopped, more):
    """A search that tried everything (or found the request infeasible in seconds) is not
    helped by more time: its refusal does not advise --budget-minutes."""
    from mass.calibrate.judge import Baselines
    from mass.calibrate.report import failure_message

    base = Baselines(["s"], [], {"s": 0.5}, {"s": 0.5}, {"s": {"logreg": 0.9}}, 100, {})
    report = {"verdict": "no configuration met the policy on validation", "seconds": 4.0,
              "stopped": stopped, "frontier": []}  # fmt: skip
    msg = failure_message(report, base)
    assert f"(stopped: {stopped})" in msg and "loosen the policy (--policy)" in msg
    assert ("--budget-minutes" in msg) is more


def test_the_calibrated_config_hash_ignores_how_long_calibration_took():
    """Two runs that chose the same differ only in their seconds: the same hash, so the same
    modifier bytes and export sha256 (before: `dvc repro -f` changed both, and with them the
    key of the release noise of the same rows)."""
    from mass.calibrate.flow import calibrated_hash, timeless

    config = {"method": "ot_repair", "params": {"cell_rows": 10}}
    chosen = {"candidate": "ot-repair+cells", "output_noise": 0.0, "seconds": 13.7}
    assert calibrated_hash(config, chosen) == calibrated_hash(config, {**chosen, "seconds": 13.3})
    assert calibrated_hash(config, chosen) != calibrated_hash(
        config, {**chosen, "candidate": "ot-repair+cells|R"}
    )
    # and the modifier's metadata records the choice without them
    assert timeless(chosen) == {"candidate": "ot-repair+cells", "output_noise": 0.0}
