"""GX Data Docs as GX builds them reference CDNs; after make_offline no page references any."""

from __future__ import annotations

import re
import shutil

import pytest

from mass.audit import AuditRequest, policy_from_dict, run_audit
from mass.report.datadocs import CSS_NAME, MARKER, make_offline

# Anything a browser fetches on opening a page (links <a href> are only followed on click).
FETCHED = re.compile(
    r"""<(script|img|link|iframe|source|video|audio)\b[^>]*\b(src|href)\s*=\s*["']?(https?:)?//"""
    r"""|url\(\s*["']?(https?:)?//|@import""",
    re.I | re.S,
)


@pytest.fixture(scope="module")
def raw_docs(tmp_path_factory, synthetic_release):
    """Data Docs exactly as GX 1.x writes them (run_audit, no report step)."""
    root = tmp_path_factory.mktemp("raw")
    release, labels, _ = synthetic_release(root)
    # the synthetic release names no modifier: no key view, which the built-in policy refuses
    policy = policy_from_dict({"families": ["logreg"], "folds": 3, "gate_key_compromised": False})
    req = AuditRequest(release=str(release), labels=str(labels), suppress=("s",),
                       preserve=("r",), report_dir=str(root / "report"), policy=policy)  # fmt: skip
    assert run_audit(req).success
    return root / "report" / "data_docs"


def _pages(docs):
    return sorted(docs.rglob("*.html"))


def test_gx_pages_fetch_from_cdns_until_rewritten(raw_docs, tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(raw_docs, docs)
    before = {p: FETCHED.findall(p.read_text()) for p in _pages(docs)}
    assert len(before) == 9 and all(before.values())  # index + 4 suites + 4 validations
    assert "cdn.jsdelivr.net" in (docs / "index.html").read_text()
    rewritten = make_offline(str(docs))
    assert len(rewritten) == 9
    for page in _pages(docs):
        text = page.read_text()
        assert not FETCHED.search(text), (page, FETCHED.search(text))
        assert "<script" not in text and MARKER in text
        css = re.search(r'href="([^"]*' + CSS_NAME + ')"', text).group(1)
        assert (page.parent / css).resolve().exists(), (page, css)
    for css in (docs / "static" / "styles").glob("*.css"):
        assert not FETCHED.search(css.read_text()), css
    assert make_offline(str(docs)) == []  # idempotent


def test_index_tables_are_rendered_without_javascript(raw_docs, tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(raw_docs, docs)
    make_offline(str(docs))
    index = (docs / "index.html").read_text()
    links = set(re.findall(r'href="(validations/[^"]+\.html)"', index))
    assert len(links) == 4 and all((docs / link).exists() for link in links)
    assert index.count("Success</a>") == 4
    for suite in ("release_columns", "release_metadata", "release_rows", "attribute_privacy"):
        assert f'href="expectations/{suite}.html"' in index
