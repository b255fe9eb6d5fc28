"""Great Expectations Data Docs that work without network.

GX 1.x pages load Bootstrap, jQuery, bootstrap-table, Font Awesome, Vega, popper and a
datepicker from public CDNs (render/view/templates/page.j2, index_page.j2,
js_script_imports.j2) and the logo from S3; offline, the index's two tables stay empty
because bootstrap-table fills them from a JavaScript literal, and the pass/fail icons vanish.

:func:`make_offline` rewrites every page of a built site in place, with no dependency:

- every ``<script>`` is removed (the pages need none once the tables are static);
- every stylesheet ``<link>`` to another host is removed and one local stylesheet,
  ``static/styles/mass_offline.css`` (written here: a small grid, tables, and the icons GX
  uses drawn as text), is linked instead;
- external images point at GX's own copies in ``static/images``; ``url(http...)`` in inline
  and local CSS becomes ``none``;
- the index's tables (validation results, expectation suites) are rendered as plain HTML
  rows from the data literal bootstrap-table would have read.

The rewrite is idempotent (a marker meta tag) and leaves ``<a href>`` links alone: links are
followed only when clicked, never fetched by opening a page.
"""

from __future__ import annotations

import ast
import html
import logging
import os
import re

log = logging.getLogger(__name__)
MARKER = '<meta name="mass-offline" content="1">'
CSS_NAME = "mass_offline.css"

OFFLINE_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;
 margin:0;padding:.5rem 1rem;overflow-wrap:break-word}
.container,.container-fluid{max-width:80rem;margin:0 auto;padding-top:.5rem}
.row{display:flex;flex-wrap:wrap;gap:0 1rem}
[class*="col-"]{flex:1 1 18rem;min-width:0}
.col-12{flex-basis:100%}
nav,.navbar{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;padding:.3rem 0}
table{border-collapse:collapse;margin:.3rem 0 .8rem;max-width:100%}
th,td{border:1px solid #d0d7de;padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}.show-scrollbars{overflow-x:auto;max-width:100%}
.card{border:1px solid #d0d7de;border-radius:6px;margin:.6rem 0;padding:.4rem .8rem}
.card-header{font-weight:600}
.text-success{color:#1a7f37}.text-danger{color:#cf222e}.text-warning{color:#9a6700}
.d-none,.invisible,[hidden],#ge-cta-footer,.btn-group-toggle,.cooltip .top,
.cooltip .bottom,footer,button,[id$="-toolbar"]{display:none!important}
img{max-width:100%;height:auto}
pre,code{white-space:pre-wrap;word-break:break-all}
i.fas,i.fa,i.far{font-style:normal;font-weight:700}
.fa-check-circle::before,.fa-check::before,.fa-circle-check::before{content:"\\2714"}
.fa-times::before,.fa-times-circle::before,.fa-xmark::before,.fa-circle-xmark::before
 {content:"\\2718"}
.fa-exclamation-triangle::before,.fa-triangle-exclamation::before{content:"\\26A0"}
.fa-question-circle::before,.fa-circle-question::before{content:"?"}
.fa-info-circle::before,.fa-circle-info::before{content:"i"}
.fa-external-link-alt::before,.fa-arrow-up-right-from-square::before{content:"\\2197"}
@media print{.show-scrollbars{overflow:visible}}
"""

_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.S | re.I)
_LINK = re.compile(r"<link\b[^>]*>", re.I)
_HREF = re.compile(r"""href\s*=\s*["']([^"']*)["']""", re.I)
_IMG_SRC = re.compile(r"""(<img\b[^>]*?\bsrc\s*=\s*)(["'])(https?:)?//[^"']*\2""", re.I | re.S)
_CSS_URL = re.compile(r"""url\(\s*(["']?)(https?:)?//[^)]*\)""", re.I)
_IMPORT = re.compile(r"""@import\s+(url\()?\s*["']?(https?:)?//[^;]*;""", re.I)
_BT_CALL = re.compile(
    r"\$\('#(?P<id>[\w-]+)'\)\.bootstrapTable\(\s*Object\.assign\(\s*\{\s*columns:\s*"
    r"(?P<columns>\[.*?\]),\s*data:\s*(?P<data>\[.*?\]),\s*toolbar:",
    re.S,
)
_EXTERNAL = re.compile(r"^\s*(https?:)?//", re.I)


def _relative_static(docs_dir: str, page: str) -> str:
    rel = os.path.relpath(os.path.join(docs_dir, "static"), os.path.dirname(page))
    return rel.replace(os.sep, "/")


def _cell(column: str, row: dict) -> str:
    """A table cell as GX's formatter would show it: its HTML is GX's own rendering."""
    value = row.get(column, "")
    text = value if isinstance(value, str) else html.escape(str(value))
    link = row.get("_table_row_link_path")
    if link and column in ("expectation_suite_name", "run_time") and "<a " not in text:
        text = f'<a href="{html.escape(link, quote=True)}">{text}</a>'
    return text


def _static_table(columns: list[dict], data: list[dict]) -> str:
    """tbody/thead HTML for one bootstrap-table; the status column links the validation."""
    head = "".join(f"<th>{html.escape(str(c.get('title', c.get('field', ''))))}</th>"
                   for c in columns)  # fmt: skip
    rows = []
    for row in data:
        tds = []
        for c in columns:
            field = str(c.get("field", ""))
            text = _cell(field, row)
            if field == "validation_success":
                status = html.escape(str(row.get("_validation_success_text", "")))
                link = html.escape(str(row.get("_table_row_link_path", "")), quote=True)
                text = f'<a href="{link}">{text} {status}</a>'
            tds.append(f"<td>{text}</td>")
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody>"


def _fill_tables(page: str) -> str:
    for m in _BT_CALL.finditer(page):
        try:
            columns = ast.literal_eval(m.group("columns"))
            data = ast.literal_eval(m.group("data"))
        except (ValueError, SyntaxError) as e:
            log.warning("Data Docs: table %s not rendered statically (%s)", m.group("id"), e)
            continue
        table = re.compile(rf"(<table\s[^>]*id=\"{re.escape(m.group('id'))}\"[^>]*>)\s*</table>")
        page = table.sub(lambda t, c=columns, d=data: t.group(1) + _static_table(c, d) + "</table>",
                         page, count=1)  # fmt: skip
    return page


def _drop_external_links(page: str) -> str:
    def keep(m: re.Match) -> str:
        href = _HREF.search(m.group(0))
        return "" if href and _EXTERNAL.match(href.group(1)) else m.group(0)

    return _LINK.sub(keep, page)


_HANDLER = re.compile(r"""(<[^>]*?)\s+on[a-z]+\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)""", re.I)
_JS_URL = re.compile(r"""(\b(?:href|src|action|formaction)\s*=\s*["']?)\s*javascript:""", re.I)


def _defuse(page: str) -> str:
    """No event-handler attribute and no ``javascript:`` URL survives (defence in depth: the
    names from data are escaped where they enter GX, :func:`mass.audit.suite.build_suites`)."""
    before = None
    while before != page:
        before, page = page, _HANDLER.sub(r"\1", page)
    return _JS_URL.sub(r"\1#", page)


def rewrite_page(page: str, static: str) -> str:
    """One page's HTML made offline; ``static`` is the relative path to ``static/``."""
    if MARKER in page:
        return page
    page = _fill_tables(page)
    page = _defuse(_SCRIPT.sub("", page))
    page = _drop_external_links(page)
    page = _IMG_SRC.sub(lambda m: f"{m.group(1)}{m.group(2)}{static}/images/logo-long.png"
                        f"{m.group(2)}", page)  # fmt: skip
    page = _CSS_URL.sub("none", _IMPORT.sub("", page))
    head = f'{MARKER}<link rel="stylesheet" href="{static}/styles/{CSS_NAME}">'
    return re.sub(r"<head>", lambda _m: "<head>" + head, page, count=1, flags=re.I)


def make_offline(docs_dir: str) -> list[str]:
    """Rewrite every page under ``docs_dir`` in place; returns the pages rewritten."""
    styles = os.path.join(docs_dir, "static", "styles")
    os.makedirs(styles, exist_ok=True)
    with open(os.path.join(styles, CSS_NAME), "w") as f:
        f.write(OFFLINE_CSS)
    for name in os.listdir(styles):  # GX's own CSS points a dark-mode logo at S3
        if name.endswith(".css") and name != CSS_NAME:
            path = os.path.join(styles, name)
            with open(path, encoding="utf-8") as f:
                css = f.read()
            fixed = _CSS_URL.sub("none", _IMPORT.sub("", css))
            if fixed != css:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(fixed)
    done = []
    for root, _dirs, files in os.walk(docs_dir):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                page = f.read()
            new = rewrite_page(page, _relative_static(docs_dir, path))
            if new != page:
                tmp = f"{path}.tmp-{os.getpid()}"
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(new)
                os.replace(tmp, path)
                done.append(path)
    return done
