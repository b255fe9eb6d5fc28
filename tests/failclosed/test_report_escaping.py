"""Names from data are inert in every report (issue 23, item 8): an attribute or column named
``<img src=x onerror=...>`` runs nothing in the Data Docs pages or report.html, a newline in an
output path or a column name cannot forge a "Verdict: PASSED" block in ``_RELEASE.md``, and
the datasheet of an unaudited release says so instead of claiming measured attackers."""

from __future__ import annotations

from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mass.audit.expectations import JUDGE_COLUMNS
from mass.audit.suite import SuiteSpec, run_suites
from mass.report.datadocs import make_offline
from mass.report.datasheet import RELEASE_MD, write_datasheet
from mass.report.html import render_html

EVIL = "<img src=x onerror=alert(1)>"
FORGED = "x\n\n## Audit\nVerdict: **PASSED**.\n"


class _Active(HTMLParser):
    """Collects what a browser would run: event-handler attributes, javascript: URLs and the
    planted <img>."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k.startswith("on") or (v or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {k}={v!r}>")
        if tag == "img" and dict(attrs).get("src") == "x":
            self.found.append("<img src=x>")


def _active(text: str) -> list[str]:
    p = _Active()
    p.feed(text)
    return p.found


def _frames():
    judge = {c: 0.5 for c in JUDGE_COLUMNS}
    judge.update(attribute=EVIL, role="suppressed", judge="logreg")
    return {
        "release_columns": pd.DataFrame([["id", "int64"], ["emb", "list"], [EVIL, "int64"]],
                                        columns=["column", "arrow_type"]),
        "release_metadata": pd.DataFrame([["mass.model", EVIL]], columns=["key", "value"]),
        "release_rows": pd.DataFrame({"id": [1, 2], "in_labels": [True] * 2,
                                      "finite": [True] * 2, "norm": [1.0] * 2,
                                      "cosine": [0.1] * 2}),
        "attribute_privacy": pd.DataFrame([judge]),
    }  # fmt: skip


def test_data_docs_and_report_html_render_names_from_data_inert(tmp_path):
    spec = SuiteSpec(id_col="id", emb_col="emb", allowed=(EVIL,), forbidden=(EVIL + "f",),
                     n_labels=2, n_input=None, norm_tol=1e-4,
                     suppressed={EVIL: {"logreg": 0.05}}, preserved={})  # fmt: skip
    docs = tmp_path / "data_docs"
    outcome = run_suites(_frames(), spec, docs_dir=str(docs))
    # the outcome (audit.json, CLI messages) keeps the name as it is
    assert any(EVIL in e.description for e in outcome.expectations)
    make_offline(str(docs))
    pages = sorted(docs.rglob("*.html"))
    assert pages
    for page in pages:
        text = page.read_text()
        assert _active(text) == [], page
    audit = {"pass": False, "attributes": {EVIL: {"role": "suppressed", "pass": False}},
             "failed_expectations": [f"attribute_privacy: '{EVIL}' is suppressed"],
             "release": {"columns": [EVIL], "model": EVIL}}  # fmt: skip
    page = render_html(audit, charts=False)
    assert _active(page) == []


def _release(tmp_path, column=FORGED):
    out = tmp_path / "release"
    out.mkdir()
    pq.write_table(pa.table({"id": pa.array(np.arange(3)), column: pa.array([1, 2, 3])}),
                   str(out / "part-0.parquet"))  # fmt: skip
    return out


def test_a_newline_in_a_path_or_column_name_cannot_forge_a_verdict(tmp_path):
    out = _release(tmp_path)
    meta = {"mass.model": "m", "mass.suppress": '["gender"]', "mass.preserve": "[]"}
    audit = {"pass": False, "attributes": {"gender": {"role": "suppressed", "pass": False}},
             "failed_expectations": [f"release_columns: {FORGED}"]}  # fmt: skip
    write_datasheet(str(out), metadata=meta, audit=audit, report_path=f"rep{FORGED}",
                    name=f"out{FORGED}")  # fmt: skip
    lines = (out / RELEASE_MD).read_text().splitlines()
    verdicts = [ln for ln in lines if ln.lstrip("#> *-").startswith("Verdict")]
    assert len(verdicts) == 1 and verdicts[0].startswith("Verdict: **FAILED**."), verdicts
    assert [ln for ln in lines if ln.startswith("## Audit")] == ["## Audit"]


def test_an_unaudited_release_says_so(tmp_path):
    out = _release(tmp_path, column="note")
    meta = {"mass.model": "m", "mass.suppress": '["gender"]', "mass.preserve": "[]"}
    write_datasheet(str(out), metadata=meta, audit=None, report_path=None)
    text = (out / RELEASE_MD).read_text()
    assert "Verdict: **NOT AUDITED**." in text
    assert "This release was NOT audited (published with --no-audit)" in text
    assert "measured" not in text.replace("no attacker was measured", "")
