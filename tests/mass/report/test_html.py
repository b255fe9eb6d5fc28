"""report.html from audit.json: every contract field shown, missing ones tolerated, all escaped."""

from __future__ import annotations

import html
import json
import re

from mass.cli import main
from mass.report import render_html, write_html_report

# audit.json as the reworked audit writes it (docs/contracts.md fields + the new ones).
FULL = {
    "pass": False,
    "rows": {
        "release": 400,
        "labels": 400,
        "input": None,
        "matched": 400,
        "nonfinite": 0,
        "audited": 400,
    },  # fmt: skip
    "attributes": {
        "colour": {
            "role": "suppressed",
            "n": 400,
            "majority": 0.34,
            "floor": 0.36,
            "baseline": 0.36,
            "original": 0.99,
            "frozen_x": 0.98,
            "frozen_xprime": 0.35,
            "logreg": 0.61,
            "knn": 0.37,
            "worst": 0.61,
            "excess": 0.25,
            "pass": False,
            "chance": 0.333,
            "limit": 0.41,
            "balanced_limit": 0.383,
            "balanced": {"frozen": 0.34, "logreg": 0.6, "knn": 0.36},
            "ci_high": {"frozen": 0.39, "logreg": 0.65, "knn": 0.41},
            "balanced_ci_high": {"frozen": 0.38, "logreg": 0.64, "knn": 0.4},
            "learning_curve": {
                "logreg": [[0.25, 0.45], [0.5, 0.55], [1.0, 0.61]],
                "knn": [[0.25, 0.35], [1.0, 0.37]],
            },
            "curve_climbing": True,
            "key_compromised": {"logreg": 0.93, "knn": 0.88},
        },  # fmt: skip
        "digit": {
            "role": "preserved",
            "n": 400,
            "majority": 0.11,
            "floor": 0.11,
            "baseline": 0.11,
            "original": 0.95,
            "frozen_x": None,
            "frozen_xprime": None,
            "logreg": 0.93,
            "knn": 0.9,
            "worst": 0.93,
            "retention": 0.979,
            "pass": True,
            "chance": 0.1,
            "balanced": {"logreg": 0.92, "knn": 0.89},
            "key_compromised": None,
        },  # fmt: skip
    },
    "aum": 0.4,
    "expectations": {"evaluated": 12, "failed": 1},
    "failed_expectations": ["attribute_privacy: 'colour' is suppressed: ..."],
    "release": {
        "method": "mass",
        "model": "mass_modifier",
        "model_version": "3",
        "forced_columns": [],
        "columns": ["id", "emb"],
    },  # fmt: skip
    "seconds": 4.2,
    "policy": {
        "frozen_margin": 0.05,
        "min_utility_fraction": 0.9,
        "families": ["logreg", "knn"],
        "preserve": {"digit": 0.95},
    },  # fmt: skip
    "lineage": {
        "input": "data/features/test",
        "model": "mass_modifier",
        "version": "3",
        "fingerprints": {"noise_key": "ab12cd34", "signature": "ff00"},
        "config_hash": "9f8e7d",
        "runner": "DirectRunner",
        "time": "2026-11-23T10:00:00Z",
        "rows": 400,
        "quarantined": 2,
    },  # fmt: skip
}

# audit.json as today's audit writes it: none of the new fields.
OLD = {
    "pass": True,
    "rows": {
        "release": 10,
        "labels": 10,
        "input": None,
        "matched": 10,
        "nonfinite": 0,
        "audited": 10,
    },  # fmt: skip
    "attributes": {
        "s": {
            "role": "suppressed",
            "n": 10,
            "majority": 0.5,
            "floor": 0.5,
            "baseline": 0.5,
            "original": 1.0,
            "frozen_x": None,
            "frozen_xprime": None,
            "logreg": 0.5,
            "worst": 0.5,
            "excess": 0.0,
            "pass": True,
        }
    },  # fmt: skip
    "aum": None,
    "expectations": {"evaluated": 9, "failed": 0},
    "failed_expectations": [],
    "release": {
        "method": "m",
        "model": "x",
        "model_version": "1",
        "forced_columns": [],
        "columns": ["id", "emb"],
    },  # fmt: skip
    "seconds": 1.0,
}


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_every_contract_field_is_rendered():
    page = render_html(FULL, docs_href="data_docs/index.html")
    text = _text(page)
    assert text.index("Audit FAILED") < text.index("What failed") < text.index("Attributes")
    for needle in ("colour (suppressed): FAIL", "digit (preserved): PASS", "0.410", "0.383",
                   "0.650", "0.640", "0.600", "0.333", "0.930", "0.880", "0.979", "0.950",
                   "learning curve still climbing", "fingerprints.noise_key", "ab12cd34",
                   "config_hash", "DirectRunner", "quarantined", "Policy",
                   "release.model_version", "11 of 12 expectations met"):  # fmt: skip
        assert needle in text, needle
    # chart, learning curves and key-compromised figure: three embedded PNGs, nothing fetched
    assert page.count("src='data:image/png;base64,") == 3
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", page)
    assert "<script" not in page
    assert "href='data_docs/index.html'" in page


def test_failed_attribute_says_what_to_do():
    text = _text(render_html(FULL, charts=False))
    assert "'colour' is not suppressed" in text and "Do not publish" in text
    assert "limit 0.410" in text and "Retrain the modifier" in text
    assert "Audit on more rows" in text  # the climbing learning curve


def test_an_older_audit_json_renders_with_missing_fields_shown_as_dashes():
    page = render_html(OLD)
    text = _text(page)
    assert "Audit PASSED" in text and "Nothing failed" in text
    assert "limit (accuracy) \u2014" in text and "chance (1/k) \u2014" in text
    assert page.count("data:image/png;base64,") == 1  # no curves, no key figure
    assert "Learning curves" not in text and "Data Docs" not in text


def test_strings_from_audit_json_are_escaped():
    evil = "<img src=x onerror=alert(1)>"
    audit = json.loads(json.dumps(OLD))
    audit["attributes"][evil] = audit["attributes"].pop("s")
    audit["failed_expectations"] = [f"{evil}: '\"><script>alert(2)</script>"]
    audit["lineage"] = {evil: evil, "input": "a'b\"c"}
    page = render_html(audit)
    assert "<img src=x" not in page and "<script>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "a&#x27;b&quot;c" in page


def test_mass_report_rerenders_from_audit_json_alone(tmp_path, capsys):
    (tmp_path / "audit.json").write_text(json.dumps(FULL))
    assert main(["report", str(tmp_path)]) == 0
    first = (tmp_path / "report.html").read_text()
    assert "Audit FAILED" in first and str(tmp_path / "report.html") in capsys.readouterr().out
    FULL_PASS = {**FULL, "pass": True, "failed_expectations": []}
    (tmp_path / "audit.json").write_text(json.dumps(FULL_PASS))
    write_html_report(str(tmp_path))
    assert "Audit PASSED" in (tmp_path / "report.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.json", "report.html"]


def test_mass_report_finds_the_report_through_a_release_datasheet(tmp_path):
    report = tmp_path / "reports" / "audit"
    report.mkdir(parents=True)
    (report / "audit.json").write_text(json.dumps(OLD))
    release = tmp_path / "release"
    release.mkdir()
    (release / "_release.json").write_text(json.dumps(
        {"datasheet": {"audit": {"report": str(report / "report.html")}}}))  # fmt: skip
    assert main(["report", str(release)]) == 0
    assert (report / "report.html").exists() and not (release / "report.html").exists()


def test_mass_report_without_audit_json_names_the_directory(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "audit.json" in err and "mass audit" in err


def test_mass_report_on_a_release_with_a_broken_datasheet_is_an_input_error(tmp_path, capsys):
    (tmp_path / "_release.json").write_text("[1, 2]")
    assert main(["report", str(tmp_path)]) == 2
    assert "_release.json: not a readable datasheet" in capsys.readouterr().err


def test_a_suppressed_attribute_failed_for_want_of_a_key_view_says_so_on_the_page():
    """Under a policy gating the key-compromised view, an attribute whose view could not be
    computed fails closed with its bounds within the limit: the page says why (as the CLI
    summary and the publication gate do); with the gate off it says nothing of the kind."""
    audit = {
        "pass": False, "rows": {"release": 10},
        "policy": {"gate_key_compromised": True},
        "key_compromised_status": "no mass.modifier metadata: not computed",
        "attributes": {"s": {"role": "suppressed", "pass": False, "worst": 0.51,
                             "ci_high": {"logreg": 0.55}, "limit": 0.6,
                             "key_compromised": None}},
    }  # fmt: skip
    page = render_html(audit, charts=False)
    assert "failed closed: key-compromised view not judged" in page
    assert "no mass.modifier metadata: not computed" in page
    audit["policy"]["gate_key_compromised"] = False
    assert "key-compromised view not judged" not in render_html(audit, charts=False)


def test_mass_report_refuses_an_audit_json_without_a_verdict(tmp_path, capsys):
    """`{}` is no audit: refused, not rendered as "Audit UNKNOWN ... Nothing failed. The
    release may be published under this policy"."""
    (tmp_path / "audit.json").write_text("{}")
    assert main(["report", str(tmp_path)]) == 2
    assert "no verdict in it" in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists()
