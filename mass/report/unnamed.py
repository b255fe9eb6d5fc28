"""What a release keeps beyond the named preserved attributes, for readers: the watch
attributes and the label-free structure of audit.json's ``unnamed`` section (written by
mass.audit.unnamed) as HTML for report.html and as Markdown for _RELEASE.md, and the plain
statement a last-resort release carries (data minimisation). Every field optional, as in
:mod:`mass.report.view`."""

from __future__ import annotations

import html
from collections.abc import Mapping

from mass.report import view

LAST_RESORT_METHODS = ("leace_project",)
MINIMISATION = ("This release is data minimisation: calibration's last resort "
                "(leace_project) kept only the preserved attributes' discriminant directions, "
                "so everything but the named preserved attributes is gone: the embedding is not "
                "useful for tasks beyond the preserved attributes.")  # fmt: skip


def is_minimisation(method) -> bool:
    return str(method) in LAST_RESORT_METHODS


def unnamed_of(audit: Mapping | None) -> dict:
    u = audit.get("unnamed") if isinstance(audit, Mapping) else None
    return dict(u) if isinstance(u, Mapping) else {}


def watch_rows(audit: Mapping | None) -> dict[str, dict]:
    w = unnamed_of(audit).get("watch")
    return {str(k): dict(v) for k, v in w.items() if isinstance(v, Mapping)} if isinstance(
        w, Mapping) else {}  # fmt: skip


def _dependence(row: Mapping) -> str:
    dep = row.get("dependence")
    if not isinstance(dep, Mapping):
        return "\u2014"
    return "; ".join(f"V({s}) {view.fmt(d.get('cramers_v'), 2)}, from {s} alone "
                     f"{view.fmt(d.get('from_s'))}" for s, d in dep.items()
                     if isinstance(d, Mapping))  # fmt: skip


def _rare(row: Mapping) -> str:
    """``class: rows`` of the classes with fewer rows than folds (mass.metrics.strata)."""
    rare = row.get("rare_classes")
    if not isinstance(rare, Mapping) or not rare:
        return "\u2014"
    return ", ".join(f"{c}: {n}" for c, n in rare.items())


def _kept(row: Mapping) -> str:
    return ("nothing learnable" if view.num(row.get("kept")) is None
            else view.fmt(row.get("kept"), 2) + spread(row))  # fmt: skip


def spread(row: Mapping) -> str:
    """`` (0.78-0.80 over 3 fold orders)`` for a watch reading repeated over fold orders
    (``repeats``, ``kept_range``), else nothing."""
    rng, n = row.get("kept_range"), view.num(row.get("repeats"))
    if n is None or n < 2 or not isinstance(rng, list | tuple) or len(rng) != 2:
        return ""
    return f" ({view.fmt(rng[0], 2)}-{view.fmt(rng[1], 2)} over {int(n)} fold orders)"


def capacity_of(audit: Mapping | None) -> str | None:
    """audit.json ``unnamed.capacity`` (a cell release with watch attributes) in words."""
    cap = unnamed_of(audit).get("capacity")
    if not isinstance(cap, Mapping):
        return None
    fits = ("within what they carry" if cap.get("watch_fits")
            else "more than they can carry: independent ones cannot all be kept whole")  # fmt: skip
    return (f"Capacity: {cap.get('cells')} cells carry at most {view.fmt(cap.get('bits_max'), 2)} "
            f"bits ({view.fmt(cap.get('bits_rows'), 2)} on these {cap.get('rows')} rows); the "
            f"watch attributes hold {view.fmt(cap.get('watch_bits_total'), 2)} bits, {fits} "
            "(docs/calibration.md, \"What M cells can keep\").")  # fmt: skip


def _structure(audit: Mapping) -> list[tuple[str, str, str, str]]:
    u = unnamed_of(audit)
    st, ref = u.get("structure"), u.get("structure_reference")
    ref = ref if isinstance(ref, Mapping) else {}
    out = []
    for label, d in (
        ("this release", st),
        ("identity (nothing removed)", ref.get("identity")),
        ("last resort (R's span only)", ref.get("last_resort")),
    ):
        if isinstance(d, Mapping):
            out.append((label, view.fmt(d.get("knn_overlap")), view.fmt(d.get("cka")),
                        view.fmt(d.get("dcor"))))  # fmt: skip
    return out


def unnamed_html(audit: Mapping) -> str:
    """report.html's section (empty when the audit measured none of it)."""
    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    method = (audit.get("release") or {}).get("method") if isinstance(
        audit.get("release"), Mapping) else None  # fmt: skip
    watch, structure = watch_rows(audit), _structure(audit)
    if not watch and not structure and not is_minimisation(method):
        return ""
    parts = ["<section id=unnamed><h2>Utility nobody named</h2>"]
    if is_minimisation(method):
        parts.append(f"<p class=bad><strong>{e(MINIMISATION)}</strong></p>")
    parts.append("<p class=muted>Watch attributes are labelled but neither suppressed nor "
                 "preserved: no method saw them. Kept = (best attacker on the release - "
                 "majority) / (best on the original - majority); V and 'from S alone' say how "
                 "much of it the suppressed attributes explain (a loss S explains is the price "
                 "of suppression). Structure is measured within each suppressed class, so "
                 "removing S is not counted as a loss (docs/audit.md).</p>")  # fmt: skip
    if watch:
        head = ["watch attribute", "kept", "release", "original", "majority",
                "share S explains", "dependence on S",
                "rare classes (fewer rows than folds)"]  # fmt: skip
        rows = "".join(
            "<tr>" + "".join(f"<td>{e(c)}</td>" for c in (
                a, _kept(w), view.fmt(w.get("release")), view.fmt(w.get("original")),
                view.fmt(w.get("majority")), view.fmt(w.get("explained_by_s"), 2),
                _dependence(w), _rare(w))) + "</tr>"
            for a, w in watch.items())  # fmt: skip
        ths = "".join(f"<th scope=col>{e(h)}</th>" for h in head)
        parts.append(f"<div class=tbl><table class=watch><thead><tr>{ths}</tr></thead>"
                     f"<tbody>{rows}</tbody></table></div>")  # fmt: skip
        if (cap := capacity_of(audit)) is not None:
            parts.append(f"<p class=capacity>{e(cap)}</p>")
    if structure:
        ths = "".join(
            f"<th scope=col>{e(h)}</th>"
            for h in ("label-free, within S", "kNN overlap", "linear CKA", "distance corr.")
        )
        rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>"
                       for r in structure)  # fmt: skip
        parts.append(f"<div class=tbl><table class=structure><thead><tr>{ths}</tr></thead>"
                     f"<tbody>{rows}</tbody></table></div>")  # fmt: skip
    parts.append("</section>")
    return "".join(parts)


def unnamed_markdown(audit: Mapping | None) -> list[str]:
    """_RELEASE.md's lines under the audit (none when it measured none of it)."""
    lines = []
    for a, w in watch_rows(audit).items():
        lines.append(f"- {a} (watch, named by no flag): kept {_kept(w)} of its information "
                     f"(release {view.fmt(w.get('release'))}, original "
                     f"{view.fmt(w.get('original'))}, majority {view.fmt(w.get('majority'))}; "
                     f"{_dependence(w)}"
                     + (f"; rare classes {_rare(w)})" if w.get("rare_classes") else ")"))  # fmt: skip
    if (cap := capacity_of(audit)) is not None:
        lines.append(f"- {cap}")
    for label, knn, cka, dcor in _structure(audit or {}):
        lines.append(f"- structure within S, {label}: kNN overlap {knn}, CKA {cka}, "
                     f"distance correlation {dcor}")  # fmt: skip
    return lines
