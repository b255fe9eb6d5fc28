"""mass.api.audit_release: `mass audit` from Python, on in-memory tables, rendered in a notebook."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from mass.api import AuditReport, audit_release
from mass.audit import policy_from_dict
from mass.audit.suite import REQUIRED_METADATA
from mass.synthetic import block_attributes


@pytest.fixture(scope="module")
def rows():
    d = block_attributes(1500, 32, seed=4)
    x = d["x"].astype(np.float32)
    dropped = x.copy()
    dropped[:, :8] = 0.0  # s lives in dims 0-7: zeroing them is a release that hides s
    dropped /= np.linalg.norm(dropped, axis=1, keepdims=True)
    labels = pd.DataFrame({"id": d["id"], "s": d["s"], "r": d["r"]})
    return {"x": x, "dropped": dropped, "ids": d["id"], "labels": labels}


# a hand-made release has no modifier whose noise a key holder could remove: that view is
# not gated here (the built-in policy refuses a release it cannot judge that way)
POLICY = policy_from_dict({"families": ["logreg", "knn"], "folds": 3,
                           "gate_key_compromised": False})  # fmt: skip


def _release(x, ids, *, meta: bool = True):
    """x as a release table with the ``mass.*`` metadata a released part carries."""
    table = pa.table({"id": ids, "emb": pa.FixedSizeListArray.from_arrays(
        pa.array(x.reshape(-1)), x.shape[1])})  # fmt: skip
    values = dict.fromkeys(REQUIRED_METADATA, "x")
    values.update({"mass.suppress": '["s"]', "mass.preserve": '["r"]',
                   "mass.forced_columns": "[]"})  # fmt: skip
    return table.replace_schema_metadata(values) if meta else table


def test_a_release_that_hides_s_passes_and_renders_the_report_page(rows, tmp_path):
    report = audit_release(_release(rows["dropped"], rows["ids"]), rows["labels"],
                           suppress="s", preserve="r", report_dir=str(tmp_path / "rep"), policy=POLICY,
                           input=_release(rows["x"], rows["ids"]))  # fmt: skip
    assert isinstance(report, AuditReport) and report.passed, str(report)
    # the notebook shows the very page `mass audit` writes
    assert report._repr_html_() == (tmp_path / "rep" / "report.html").read_text()
    assert report.figures["privacy_utility"].startswith(b"\x89PNG")
    table = report.table.set_index("attribute")
    assert table.loc["s", "role"] == "suppressed" and bool(table.loc["s", "passed"])
    assert table.loc["r", "retention"] > 0.9


def test_the_identity_release_fails_and_says_so(rows):
    """The rows themselves released (the originals given as a numpy matrix in ``ids``
    order): s is read back, the audit fails; a failed audit is a report, not an exception,
    and its private directory is gone."""
    # an unread label column Arrow cannot hold as one type is left out, not pyarrow's error
    labels = rows["labels"].assign(note=[1, "a"] * (len(rows["ids"]) // 2))
    report = audit_release(_release(rows["x"], rows["ids"]), labels, suppress="s",
                           preserve="r", policy=POLICY, input=rows["x"], ids=rows["ids"])  # fmt: skip
    assert not report.passed
    assert report.report_dir is None
    assert "FAIL" in report.html and not bool(report.table.set_index("attribute").loc["s",
                                                                                      "passed"])  # fmt: skip
    assert "audit FAILED" in str(report)


def test_a_mixed_type_label_column_the_audit_reads_is_named(rows):
    labels = rows["labels"].assign(s=[1, "a"] * (len(rows["ids"]) // 2))
    with pytest.raises(ValueError, match="labels: column 's' mixes types: row 0 is int"):
        audit_release(_release(rows["dropped"], rows["ids"]), labels, suppress="s",
                      preserve="r", policy=POLICY)  # fmt: skip
