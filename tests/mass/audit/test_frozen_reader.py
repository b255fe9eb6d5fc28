"""The audit gates a preserved attribute on what a frozen reader sees (issue 37 item 1).

A release that keeps the preserved attribute only up to a relabelling (a binary label
flipped) reads perfectly to attackers retrained on it, and backwards to every downstream
model trained on the original rows: its frozen judge (a model fitted on the original rows,
applied unchanged to the release) fails the audit, with or without a run directory.
"""

from __future__ import annotations

import numpy as np
import pytest

from mass.audit import AuditRequest, policy_from_dict, run_audit
from mass.audit.report import write_all
from tests.mass.audit.test_audit import FAST, N, _drop_s, _write


@pytest.fixture(scope="module")
def data():
    from mass.synthetic import block_attributes

    return block_attributes(N, 24)


R_DIMS = [8, 9]  # block_attributes: r = 0 lives in dim 8, r = 1 in dim 9


def _flip_r(x):
    """The release with r's two directions swapped: r is as readable as before, inverted."""
    x = x.copy()
    x[:, R_DIMS] = x[:, R_DIMS[::-1]]
    return x


def _audit(tmp_path, release, labels):
    req = AuditRequest(release=release, labels=labels, suppress=("s",), preserve=("r",),
                       policy=policy_from_dict(FAST))  # fmt: skip
    return run_audit(req)


def _preserved(result):
    return next(r for r in result.reports if r.role == "preserved")


def test_a_release_whose_preserved_binary_label_is_flipped_fails_by_its_frozen_judge(
    tmp_path, data
):
    (tmp_path / "flip").mkdir()
    (tmp_path / "keep").mkdir()
    flipped = _audit(tmp_path / "flip", *_write(tmp_path / "flip", data,
                                                x=_flip_r(_drop_s(data["x"]))))  # fmt: skip
    kept = _audit(tmp_path / "keep", *_write(tmp_path / "keep", data, x=_drop_s(data["x"])))
    r_flip, r_keep = _preserved(flipped), _preserved(kept)
    # retrained attackers read the flipped label as well as the kept one: they cannot tell
    assert r_flip.retention > 0.95 and r_keep.retention > 0.95
    # the frozen reader (fitted on the original rows, no run directory) reads it backwards
    assert r_flip.frozen_by == "logreg" and r_flip.frozen_x > 0.9
    assert r_flip.frozen_xprime < 0.1 and r_flip.frozen_kept < 0.1
    assert r_keep.frozen_kept > 0.95
    assert kept.success, [(e.expectation, e.observed) for e in kept.outcome.failed]
    assert not flipped.success and not r_flip.passed
    failed = {(e.suite, e.expectation): e.observed for e in flipped.outcome.failed}
    assert list(failed) == [("attribute_privacy", "expect_attribute_to_be_preserved")], failed
    assert "FAILED frozen" in next(iter(failed.values()))
    # both readings reach the report: audit.json and report.html
    report = tmp_path / "flip" / "report"
    row = write_all(flipped, str(report), chart=False)["attributes"]["r"]
    assert row["frozen_by"] == "logreg" and row["frozen_kept"] < 0.1 and row["worst"] > 0.95
    html = (report / "report.html").read_text()
    assert "frozen retention" in html and "retention (release / original)" in html


def test_rows_moved_into_the_other_class_fail_on_skewed_labels_too(tmp_path, data):
    """A 90/10 preserved attribute whose rows are released in the other class's place: the
    majority-guessing floor is high, and the frozen reading still falls far below it."""
    skew = dict(data)
    rng = np.random.default_rng(3)
    r = (rng.random(N) < 0.1).astype(np.int64)
    x = data["x"].copy()
    x[:, 8:10] = 0.0
    x[np.arange(N), 8 + r] = 1.0
    skew["r"], skew["x"] = r, x / np.linalg.norm(x, axis=1, keepdims=True)
    result = _audit(tmp_path, *_write(tmp_path, skew, x=_flip_r(_drop_s(skew["x"]))))
    pr = _preserved(result)
    assert pr.retention > 0.95 and pr.frozen_kept < 0.5, (pr.retention, pr.frozen_kept)
    assert not result.success
