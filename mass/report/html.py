"""report.html: the audit as one self-contained page, rendered from audit.json alone.

Inline CSS, figures as ``data:`` URIs, no script and no external URL, so the page opens the
same on a machine without network, prints, and fits a phone. Every string that comes from
audit.json is escaped. The verdict comes first, then what failed and what to do, then one
table per attribute, the figures, and the release's lineage and policy.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import logging
import os
from collections.abc import Mapping

from mass.report import view
from mass.report.unnamed import unnamed_html

log = logging.getLogger(__name__)
REPORT_NAME = "report.html"
DOCS_DIR = "data_docs"

CSS = """
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;
 margin:0 auto;padding:1rem;max-width:62rem;overflow-wrap:break-word}
h1{font-size:1.5rem;margin:.2rem 0 .8rem}h2{font-size:1.2rem;margin:1.6rem 0 .5rem;
 border-bottom:1px solid #d0d7de}h3{font-size:1.05rem;margin:1.1rem 0 .4rem}
.verdict{padding:.8rem 1rem;border-radius:6px;color:#fff;font-size:1.1rem}
.verdict strong{font-size:1.5rem;display:block}
.pass{background:#1a7f37}.fail{background:#cf222e}.unknown{background:#6e7781}
.ok{color:#1a7f37;font-weight:600}.bad{color:#cf222e;font-weight:600}
.tbl{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.3rem 0 .8rem;font-size:.9rem;max-width:100%}
th,td{border:1px solid #d0d7de;padding:.25rem .45rem;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th{background:#f6f8fa}td.k{font-family:ui-monospace,monospace;font-size:.85rem}
td.v{font-family:ui-monospace,monospace;font-size:.85rem;word-break:break-all}
img{max-width:100%;height:auto;display:block;border:1px solid #d0d7de}
ul.todo li{margin:.3rem 0}.muted{color:#57606a;font-size:.9rem}
@media (max-width:480px){body{font-size:14px;padding:.5rem}th,td{padding:.2rem .3rem}
 table{font-size:.8rem}}
@media print{body{max-width:none;font-size:11pt}a{color:inherit}
 .verdict,.pass,.fail{-webkit-print-color-adjust:exact;print-color-adjust:exact}
 section,table,img{break-inside:avoid}h2,h3{break-after:avoid}}
"""

SCHEMA_ADVICE = {
    "release_columns": "The release carries a column it must not (a label, or one that is not "
    "allow-listed). Re-run `mass anonymize` without it, or add a harmless column to "
    "audit.allow_columns in params.yaml.",
    "release_metadata": "The release lacks the mass.* provenance keys. Re-create it with "
    "`mass anonymize` (do not copy or edit Parquet parts by hand).",
    "release_rows": "Rows do not match the labels/input (count, ids, non-finite values or "
    "norm). Check that --labels and --input belong to this release and look at the quarantine; "
    "then re-run `mass anonymize`.",
}


def _e(v) -> str:
    return html.escape(str(v), quote=True)


def _data_uri(png: bytes | None) -> str | None:
    return None if png is None else "data:image/png;base64," + base64.b64encode(png).decode()


def _verdict(audit: Mapping) -> tuple[str, str]:
    passed = audit.get("pass")
    if passed is True:
        return "pass", "PASSED"
    if passed is False:
        return "fail", "FAILED"
    return "unknown", "UNKNOWN"


def _summary(audit: Mapping) -> str:
    sup, pre = view.by_role(audit, "suppressed"), view.by_role(audit, "preserved")
    exp = audit.get("expectations") if isinstance(audit.get("expectations"), Mapping) else {}
    n, failed = view.num(exp.get("evaluated")), view.num(exp.get("failed"))
    parts = []
    if n is not None and failed is not None:
        parts.append(f"{int(n - failed)} of {int(n)} expectations met")
    rows = audit.get("rows") if isinstance(audit.get("rows"), Mapping) else {}
    if view.num(rows.get("audited")) is not None:
        parts.append(f"{int(rows['audited'])} rows audited")
    if sup:
        parts.append("suppressed: " + ", ".join(sup))
    if pre:
        parts.append("preserved: " + ", ".join(pre))
    return "; ".join(parts)


def _advice(audit: Mapping) -> list[str]:
    """One line per problem: what failed, then what to do about it."""
    out = []
    for name, row in view.by_role(audit, "suppressed").items():
        if row.get("pass") is False:
            out.append(
                f"'{name}' is not suppressed: an attacker retrained on the release predicts it "
                f"with accuracy {view.fmt(row.get('worst'))} (max(majority, floor) "
                f"{view.fmt(row.get('baseline'))}, limit {_limit_text(row, 'limit')}). Do not "
                "publish. Retrain the modifier with a stronger suppression weight (or more "
                "noise), export and anonymize again, then re-run the audit."
            )
    for name, row in view.by_role(audit, "preserved").items():
        if row.get("pass") is False:
            out.append(
                f"'{name}' lost utility: retention {view.fmt(row.get('retention'))} retrained, "
                f"{view.fmt(row.get('frozen_kept'))} read by a model trained on the original "
                f"(required {view.fmt(view.min_fraction(audit, name))}, frozen 0.1 less). A "
                "frozen reading far below the retrained one means the release keeps the "
                "attribute only up to a relabelling (classes swapped). Weaken suppression or "
                "retrain with a higher preservation weight, or lower the policy's "
                f"audit.preserve.{name} if the data owner accepts it."
            )
    failed = audit.get("failed_expectations")
    for suite, advice in SCHEMA_ADVICE.items():
        if isinstance(failed, list) and any(str(f).startswith(f"{suite}:") for f in failed):
            out.append(advice)
    for name, row in view.attributes(audit).items():
        if row.get("curve_climbing") is True:
            out.append(
                f"'{name}': the attackers' learning curve still climbs at the full sample, so "
                "a larger release could leak more. Audit on more rows (audit.max_rows) before "
                "trusting a pass."
            )
    return out


def _limit_text(row: Mapping, key: str) -> str:
    return "per judge, below" if isinstance(row.get(key), Mapping) else view.fmt(row.get(key))


def _kv_table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><td class=k>{_e(k)}</td><td class=v>{_e(v)}</td></tr>" for k, v in rows)
    return f"<div class=tbl><table><tbody>{body}</tbody></table></div>"


def _attribute(audit: Mapping, name: str, row: Mapping) -> str:
    role = str(row.get("role", "?"))
    ok = row.get("pass")
    mark = ("<span class=ok>PASS</span>" if ok is True
            else "<span class=bad>FAIL</span>" if ok is False else "?")  # fmt: skip
    facts = [("role", role), ("rows", view.fmt(row.get("n"), 0)),
             ("majority class rate", view.fmt(row.get("majority"))),
             ("chance (1/k)", view.fmt(row.get("chance"))),
             ("leakage floor", view.fmt(row.get("floor"))),
             ("max(majority, floor)", view.fmt(row.get("baseline")))]  # fmt: skip
    if role == "suppressed":
        facts += [("limit (accuracy)", _limit_text(row, "limit")),
                  ("limit (balanced accuracy)", _limit_text(row, "balanced_limit")),
                  ("worst judge on the release", view.fmt(row.get("worst"))),
                  ("excess over max(majority, floor)", view.fmt(row.get("excess")))]  # fmt: skip
    else:
        facts += [("best attacker on the release", view.fmt(row.get("worst"))),
                  ("retention (release / original)", view.fmt(row.get("retention"))),
                  ("required retention", view.fmt(view.min_fraction(audit, name))),
                  (f"frozen reading ({row.get('frozen_by') or 'none'}): original -> release",
                   f"{view.fmt(row.get('frozen_x'))} -> {view.fmt(row.get('frozen_xprime'))}"),
                  ("frozen retention (release / original)",
                   view.fmt(row.get("frozen_kept")))]  # fmt: skip
    facts.append(("best attacker on the original", view.fmt(row.get("original"))))
    if (cert := view.certificate_text(row)) is not None:  # the bound on any attacker
        facts.append(("certificate (cell release)", cert))
    unjudged = view.unjudged_key_view(audit, row)
    if unjudged:  # failed closed: the policy gates a view nobody could compute
        facts.append(("failed closed: key-compromised view not judged", unjudged))
    if row.get("rare_classes"):  # judged by the rare-class rule (docs/audit.md)
        facts.append(("rare classes (fewer rows than folds)",
                      ", ".join(f"{k}: {v}" for k, v in row["rare_classes"].items())))  # fmt: skip
    if "curve_climbing" in row:
        facts.append(("learning curve still climbing", str(row.get("curve_climbing"))))
    fact_rows = "".join(f"<tr><th scope=row>{_e(k)}</th><td class=n>{_e(v)}</td></tr>"
                        for k, v in facts)  # fmt: skip
    head = ["judge", "accuracy", "95% upper", "balanced acc.", "balanced 95% upper"]
    per_judge = [k for k in ("limit", "balanced_limit") if isinstance(row.get(k), Mapping)]
    head += [k.replace("_", " ") for k in per_judge]
    kc = view.key_compromised(row)
    if kc:
        head.append("with owner key")
    jrows = []
    for judge, acc in view.judges(row).items():
        cells = [view.fmt(acc), view.fmt(view.per_judge(row, "ci_high", judge)),
                 view.fmt(view.per_judge(row, "balanced", judge)),
                 view.fmt(view.per_judge(row, "balanced_ci_high", judge))]  # fmt: skip
        cells += [view.fmt(view.limit(row, k, judge)) for k in per_judge]
        if kc:
            cells.append(view.fmt(kc.get(judge)))
        tds = "".join(f"<td class=n>{_e(c)}</td>" for c in cells)
        jrows.append(f"<tr><th scope=row>{_e(judge)}</th>{tds}</tr>")
    ths = "".join(f"<th scope=col>{_e(h)}</th>" for h in head)
    judges_table = (f"<div class=tbl><table class=judges><thead><tr>{ths}</tr></thead>"
                    f"<tbody>{''.join(jrows)}</tbody></table></div>") if jrows else ""  # fmt: skip
    return (f"<section class=attribute id='attr-{_e(name)}'><h3>{_e(name)} ({_e(role)}): "
            f"{mark}</h3><div class=tbl><table class=facts><tbody>{fact_rows}</tbody></table>"
            f"</div>{judges_table}</section>")  # fmt: skip


def _figure(title: str, png: bytes | None, alt: str, cls: str) -> str:
    uri = _data_uri(png)
    if uri is None:
        return ""
    return f"<h2>{_e(title)}</h2><img class={cls} alt='{_e(alt)}' src='{uri}'>"


def render_html(audit: Mapping, *, docs_href: str | None = None, title: str | None = None,
                charts: bool = True) -> str:  # fmt: skip
    """The page for one audit.json (``docs_href``: relative link to the Data Docs index)."""
    from mass.report import charts as ch

    cls, word = _verdict(audit)
    title = title or "MaSS-ETL audit report"
    parts = [f"<header><h1>{_e(title)}</h1><div class='verdict {cls}' id=verdict>"
             f"<strong>Audit {word}</strong>{_e(_summary(audit))}</div></header>"]  # fmt: skip
    advice = _advice(audit)
    failed = audit.get("failed_expectations")
    failed = [str(f) for f in failed] if isinstance(failed, list) else []
    parts.append("<section id=todo><h2>What failed and what to do</h2>")
    if failed:
        parts.append("<ul>" + "".join(f"<li class=bad>{_e(f)}</li>" for f in failed) + "</ul>")
    if advice:
        parts.append("<ul class=todo>" + "".join(f"<li>{_e(a)}</li>" for a in advice) + "</ul>")
    forced = list(audit.get("forced_policy") or [])
    if forced:  # audit.force_vacuous: the policy could not fail, and the owner said run it
        parts.append("<h3 class=bad>FORCED policy: nothing could fail</h3><ul>" + "".join(
            f"<li class=bad>{_e(f)}</li>" for f in forced) + "</ul>")  # fmt: skip
    if not failed and not advice and not forced:
        parts.append("<p>Nothing failed. The release may be published under this policy.</p>")
    parts.append("</section>")
    attrs = view.attributes(audit)
    parts.append("<section id=attributes><h2>Attributes</h2>")
    parts.append("<p class=muted>Accuracy of each judge (frozen branch model, attackers "
                 "retrained on the release) predicting the attribute from the released "
                 "embeddings; a suppressed attribute passes when every judge stays within the "
                 "limit, a preserved one when its retention meets the minimum.</p>")  # fmt: skip
    parts += [_attribute(audit, n, r) for n, r in attrs.items()] or ["<p>No attribute was "
                                                                     "measured.</p>"]  # fmt: skip
    parts.append("</section>")
    parts.append(unnamed_html(audit))
    if charts:
        parts.append(_figure("Privacy and utility", ch.privacy_utility(audit),
                             "chart: accuracy of each judge per suppressed attribute and "
                             "retention per preserved attribute", "chart"))  # fmt: skip
        parts.append(
            _figure(
                "Learning curves",
                ch.learning_curves(audit),
                "chart: attacker accuracy versus training rows",
                "curves",
            )
        )
        parts.append(
            _figure(
                "If the owner key leaked",
                ch.key_compromised(audit),
                "chart: attacker accuracy with and without the owner key",
                "key",
            )
        )
    parts.append(_lineage(audit))
    if docs_href:
        parts.append(f"<section id=docs><h2>Great Expectations Data Docs</h2><p><a href='"
                     f"{_e(docs_href)}'>Every expectation and its observed value</a> (works "
                     "offline).</p></section>")  # fmt: skip
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts.append(f"<footer class=muted><p>Rendered {_e(now)} from audit.json by `mass report`; "
                 "audit.json is the record, this page a view of it.</p></footer>")  # fmt: skip
    body = "\n".join(p for p in parts if p)
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width, initial-scale=1'>"
            f"<title>{_e(title)}: {word}</title><style>{CSS}</style></head>"
            f"<body>\n{body}\n</body></html>\n")  # fmt: skip


def _lineage(audit: Mapping) -> str:
    out = ["<section id=lineage><h2>Release lineage</h2>"]
    lineage = audit.get("lineage")
    rows = view.flatten(lineage) if isinstance(lineage, Mapping) and lineage else []
    release = audit.get("release")
    if isinstance(release, Mapping):
        rows += [(f"release.{k}", v) for k, v in view.flatten(release)]
    counts = audit.get("rows")
    if isinstance(counts, Mapping):
        rows += [(f"rows.{k}", v) for k, v in view.flatten(counts)]
    if view.num(audit.get("seconds")) is not None:
        rows.append(("audit seconds", view.fmt(audit["seconds"], 1)))
    out.append(_kv_table(rows) if rows else "<p>audit.json records no lineage.</p>")
    policy = audit.get("policy")
    if isinstance(policy, Mapping) and policy:
        out.append("<h3>Policy</h3>" + _kv_table(view.flatten(policy)))
    out.append("</section>")
    return "".join(out)


def write_html_report(report_dir: str, *, offline_docs: bool = True) -> str:
    """Render ``report_dir/report.html`` from ``report_dir/audit.json`` (atomically).

    When ``report_dir/data_docs`` exists its pages are first made to work offline
    (:func:`mass.report.datadocs.make_offline`) and the page links their index.
    """
    audit = view.read_audit(report_dir)
    docs_href = None
    index = os.path.join(report_dir, DOCS_DIR, "index.html")
    if os.path.exists(index):
        if offline_docs:
            from mass.report.datadocs import make_offline

            make_offline(os.path.join(report_dir, DOCS_DIR))
        docs_href = f"{DOCS_DIR}/index.html"
    page = render_html(audit, docs_href=docs_href)
    path = os.path.join(report_dir, REPORT_NAME)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, path)
    log.info("wrote %s", path)
    return path
