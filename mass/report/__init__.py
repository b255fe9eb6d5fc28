"""What a privacy officer and a release's consumer read: the audit page and the datasheet.

- :mod:`mass.report.html`: ``report.html``, one self-contained page (inline CSS, charts as
  data URIs, no external fetch) rendered from ``audit.json`` alone, so `mass report` can
  re-render it without recomputing anything.
- :mod:`mass.report.charts`: the page's figures (matplotlib, from audit.json numbers).
- :mod:`mass.report.datadocs`: rewrites Great Expectations' Data Docs to work offline (no
  CDN scripts or stylesheets; the index's tables rendered statically).
- :mod:`mass.report.datasheet`: ``_RELEASE.md`` + ``_release.json`` beside a release's parts.
"""

__all__ = ["REPORT_NAME", "render_html", "write_datasheet", "write_html_report"]


def __getattr__(name: str):
    """The public names, imported on first use (the html page pulls in matplotlib; the
    anonymize job imports only :mod:`mass.report.datasheet`)."""
    if name == "write_datasheet":
        from mass.report.datasheet import write_datasheet

        return write_datasheet
    if name in ("REPORT_NAME", "render_html", "write_html_report"):
        from mass.report import html

        return getattr(html, name)
    raise AttributeError(f"module 'mass.report' has no attribute {name!r}")
