"""How many rows a suppressed attribute needs before a clean release can pass: the accuracy
judges' need at the majority rate, and the balanced judges' need at the class shares, which a
rare class sets (mass.audit.runner.min_rows; the audit's warning and calibration's refusal)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mass import calibrate as C
from mass.audit.policy import AuditPolicy
from mass.audit.runner import min_rows, too_few_rows
from mass.config import CalibrationConfig
from mass.errors import CalibrationError
from mass.metrics import attribute_report
from mass.synthetic import make_synthetic


def test_balanced_need_hand_computed_and_set_by_the_rarest_class():
    z = 1.959963984540054  # two-sided 95 %
    scale = ((z + 2) / 0.05) ** 2
    # 584 / 16 rows: accuracy at chance 584/600 needs few rows, the balanced judges many
    acc = scale * (584 / 600) * (16 / 600)
    bal = scale * 0.5 * 0.5 / 4 * (600 / 584 + 600 / 16)
    assert min_rows(584 / 600, 0.05, 0.95) == math.ceil(acc) < 200
    assert min_rows(584 / 600, 0.05, 0.95, [584, 16]) == math.ceil(bal) > 15_000
    # balanced classes: the two needs agree (the documented 1,570 for a binary attribute)
    assert min_rows(0.5, 0.05, 0.95, [300, 300]) == min_rows(0.5, 0.05, 0.95) == 1569
    # three classes, one rare: sum of 1 / share over k^2, times (1/3)(2/3)
    want = scale * (1 / 3) * (2 / 3) / 9 * (1000 / 480 + 1000 / 480 + 1000 / 40)
    assert min_rows(0.48, 0.05, 0.95, [480, 480, 40]) == math.ceil(want)
    # an absent class (0 rows) and a single class do not count as classes
    assert min_rows(0.5, 0.05, 0.95, [300, 0, 300]) == 1569
    assert min_rows(0.5, 0.05, 0.95, [600]) == min_rows(0.5, 0.05, 0.95)


def _clean(n: int, minority: float, seed: int = 0):
    """A release independent of s: its judges are at chance."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < minority).astype(np.int64)
    return y, rng.standard_normal((n, 8)).astype(np.float32)


def test_audit_warns_on_a_rare_class_the_accuracy_rule_misses():
    y, x = _clean(600, 0.03)
    r = attribute_report("s", y, x, x, role="suppressed", folds=5,
                         families=("logreg",), curve=False)  # fmt: skip
    assert r.n == 600 and r.n >= min_rows(r.baseline, 0.05, 0.95)  # accuracy alone: enough
    w = too_few_rows(r, y, 0.95)
    rare = int(np.bincount(y).min())
    need = min_rows(r.baseline, 0.05, 0.95, np.bincount(y))
    assert w is not None and f"its rarest class has {rare} of them" in w
    assert f"from {need} rows on" in w and need > 10_000
    # a balanced attribute on enough rows: no warning; a preserved one is never warned about
    y2, x2 = _clean(2000, 0.5, seed=1)
    r2 = attribute_report("s", y2, x2, x2, role="suppressed", folds=5,
                          families=("logreg",), curve=False)  # fmt: skip
    assert too_few_rows(r2, y2, 0.95) is None
    p = attribute_report("s", y, x, x, role="preserved", folds=5, families=("logreg",),
                         curve=False)  # fmt: skip
    assert too_few_rows(p, y, 0.95) is None


def test_calibration_refusal_names_the_rows_the_rare_class_needs(tmp_path):
    ds = make_synthetic(n=600, dim=8, s_classes=2, u_classes=2, seed=3)
    rng = np.random.default_rng(3)
    s = (rng.random(len(ds)) < 0.03).astype(np.int64)  # 3 % minority, independent of x
    s[:2] = 1  # at least two rows of it
    ds.labels["s"] = s
    space = tuple(c for c in C.SEARCH_SPACE if c.name == "leace")
    with pytest.raises(CalibrationError) as refused:
        C.calibrate(ds, suppress=["s"], preserve=["u"], policy=AuditPolicy(),
                    cfg=CalibrationConfig(budget_minutes=2), space=space,
                    out_dir=str(tmp_path))  # fmt: skip
    msg = str(refused.value)
    assert "validation rows are too few for the policy's margin" in msg
    assert f"its rarest class {int(s.sum())} of the 600 rows" in msg
    assert "above all of the rarest class, or that class merged into another" in msg
    need = int(msg.split("only from ")[1].split(" rows on")[0].replace(",", ""))
    # the balanced judges' need, at validation's stricter confidence: above the gate's own
    assert need >= min_rows(max(s.mean(), 1 - s.mean()), 0.05, 0.95, np.bincount(s)) > 10_000
