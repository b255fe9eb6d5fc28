"""report.html and the Data Docs in real headless Chromium with every network request sunk."""

from __future__ import annotations

import io


def _not_blank(png: bytes) -> float:
    """Fraction of pixels that are not (near) white."""
    import matplotlib.image as mpimg

    img = mpimg.imread(io.BytesIO(png), format="png")[..., :3]
    return float((img.min(axis=2) < 0.9).mean())


def test_negative_control_an_external_image_and_stylesheet_are_caught(browser, proxy, tmp_path):
    page_file = tmp_path / "control.html"
    page_file.write_text("<html><body><p>control</p>"
                         "<img src='http://img.mass-control.invalid/x.png'>"
                         "<link rel=stylesheet href='https://cdn.mass-control.invalid/a.css'>"
                         "<script src='https://fonts.googleapis.com/control.js'></script>"
                         "</body></html>")  # fmt: skip
    since = len(proxy.lines)
    page = browser.open(page_file.as_uri())
    seen = page.external_requests()
    assert "http://img.mass-control.invalid/x.png" in seen
    assert "https://cdn.mass-control.invalid/a.css" in seen
    # a Google host: the proxy record leaves it to Chromium's services, DevTools still sees it
    assert "https://fonts.googleapis.com/control.js" in seen
    hosts = proxy.page_hosts(since)
    assert {"img.mass-control.invalid", "cdn.mass-control.invalid"} <= hosts, proxy.lines


def test_report_shows_verdict_table_and_chart_with_no_request_leaving_the_file(
    browser, proxy, audit_report
):
    since = len(proxy.lines)
    page = browser.open((audit_report / "report.html").as_uri())
    assert page.eval("document.getElementById('verdict').innerText").startswith("Audit PASSED")
    text = page.eval("document.body.innerText")
    for needle in ("s (suppressed): PASS", "r (preserved): PASS", "logreg", "knn",
                   "leakage floor", "retention (release / original)", "Release lineage"):  # fmt: skip
        assert needle in text, needle
    cells = page.eval("[...document.querySelectorAll('section.attribute table.judges tbody th')]"
                      ".map(e => e.innerText)")  # fmt: skip
    assert cells == ["logreg", "knn", "logreg@id", "knn@id", "logreg_remap", "knn_remap",
                     "logreg@id_remap", "knn@id_remap", "frozen", "logreg", "knn"]  # fmt: skip
    # the preserved attribute is read by the frozen judge too (its row first)
    chart = page.eval("(() => { const i = document.querySelector('img.chart');"
                      " const r = i.getBoundingClientRect(); return {ok: i.complete,"
                      " w: i.naturalWidth, x: r.x, y: r.y + window.scrollY, width: r.width,"
                      " height: r.height}; })()")  # fmt: skip
    assert chart["ok"] and chart["w"] > 300 and chart["height"] > 150, chart
    png = page.screenshot({k: chart[k] for k in ("x", "y", "width", "height")})
    assert _not_blank(png) > 0.03  # bars, axes and labels drawn, not an empty box
    assert page.external_requests() == []
    assert proxy.page_hosts(since) == set(), proxy.lines[since:]


def test_report_fits_a_phone_and_prints(browser, audit_report):
    page = browser.open((audit_report / "report.html").as_uri(), width=400, height=800)
    width = page.eval("document.documentElement.scrollWidth")
    assert width <= 400, f"horizontal scroll at 400 px: content is {width} px wide"
    pdf = page.pdf()
    assert pdf.startswith(b"%PDF") and len(pdf) > 20_000


def test_data_docs_index_lists_validations_and_a_page_shows_pass_offline(
    browser, proxy, audit_report
):
    since = len(proxy.lines)
    docs = audit_report / "data_docs"
    page = browser.open((docs / "index.html").as_uri())
    links = page.eval("[...new Set([...document.querySelectorAll('a[href^=\"validations/\"]')]"
                      ".map(a => a.getAttribute('href')))]")  # fmt: skip
    assert len(links) == 4, links  # one validation per suite
    assert all((docs / link).exists() for link in links)
    text = page.eval("document.body.innerText")
    assert text.count("Success") == 4 and "attribute_privacy" in text
    assert page.external_requests() == []
    [link] = [v for v in links if "attribute_privacy" in v]
    page = browser.open((docs / link).as_uri())
    text = page.eval("document.body.innerText")
    assert "Succeeded" in text and "is suppressed" in text
    icon = page.eval("getComputedStyle(document.querySelector('i.fa-check-circle'), '::before')"
                     ".content")  # fmt: skip
    assert "\u2714" in icon  # the pass mark is drawn without Font Awesome
    assert page.external_requests() == []
    assert proxy.page_hosts(since) == set(), proxy.lines[since:]


def test_a_failing_audit_reads_failed_in_the_report_and_in_data_docs(
    browser, proxy, synthetic_release, tmp_path
):
    from mass.cli import main

    release, labels, params = synthetic_release(tmp_path, suppress_leaks=True)
    report = tmp_path / "report"
    rc = main(["audit", "--release", str(release), "--labels", str(labels), "--suppress", "s",
               "--preserve", "r", "--report", str(report), "--params", str(params)])  # fmt: skip
    assert rc == 1
    since = len(proxy.lines)
    page = browser.open((report / "report.html").as_uri())
    assert page.eval("document.getElementById('verdict').innerText").startswith("Audit FAILED")
    assert "'s' is not suppressed" in page.eval("document.getElementById('todo').innerText")
    page = browser.open((report / "data_docs" / "index.html").as_uri())
    text = page.eval("document.body.innerText")
    # the leaking release is the input itself: the bypass (release_rows) check fails too
    assert text.count("Failed") == 2 and text.count("Success") == 2
    link = page.eval("document.querySelector('a[href*=\"validations/attribute_privacy\"]')"
                     ".getAttribute('href')")  # fmt: skip
    page = browser.open((report / "data_docs" / link).as_uri())
    icon = page.eval("getComputedStyle(document.querySelector('i.fa-times'), '::before').content")
    assert "\u2718" in icon and "Failed" in page.eval("document.body.innerText")
    assert page.external_requests() == []
    assert proxy.page_hosts(since) == set(), proxy.lines[since:]
