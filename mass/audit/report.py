"""audit.json (for `dvc metrics show`), the report directory and the short stdout table."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime

from mass.audit.certified import certificate_block, certificate_line
from mass.audit.data import parse_json_list
from mass.audit.runner import AuditResult
from mass.audit.unnamed import unnamed_lines
from mass.audit.vacuity import family_margins
from mass.metrics import FROZEN, aum, column_of, judge_limit
from mass.metrics.strata import RULE as RARE_RULE


def _num(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(float(v), 6)


def attribute_passed(result: AuditResult, attr: str) -> bool:
    """Decided by the GX result of the attribute's custom expectation."""
    mine = [e for e in result.outcome.expectations if e.attribute == attr]
    return bool(mine) and all(e.success for e in mine)


def audit_metrics(result: AuditResult) -> dict:
    """Flat-ish metrics: per attribute numbers and pass, overall pass, row counts."""
    attrs: dict[str, dict] = {}
    for r in result.reports:
        row = {"role": r.role, "n": r.n, "majority": _num(r.majority), "floor": _num(r.floor),
               "baseline": _num(r.baseline), "original": _num(r.original),
               "frozen_x": _num(r.frozen_x), "frozen_xprime": _num(r.frozen_xprime)}  # fmt: skip
        # both readings of the release: retrained (attackers, worst) and frozen (who, kept)
        row["frozen_by"], row["frozen_kept"] = r.frozen_by or None, _num(r.frozen_kept)
        row.update({fam: _num(acc) for fam, acc in r.attackers.items()})
        row.update({j: _num(acc) for j, acc in r.extra_judges.items()})
        row["worst"] = _num(r.worst)
        row["chance"] = _num(r.chance)
        row["balanced_floor"] = _num(r.balanced_floor)
        row["balanced"] = {j: _num(v) for j, v in r.balanced.items()}
        row["ci_high"] = {j: _num(v) for j, v in r.ci_high.items()}
        row["balanced_ci_high"] = {j: _num(v) for j, v in r.balanced_ci_high.items()}
        if r.role == "suppressed":
            row["excess"] = _num(r.worst - r.baseline)
            limits = {j: judge_limit(r.baseline, m) for j, m in r.margins.items()}
            bal = {j: judge_limit(r.balanced_baseline, m) for j, m in r.margins.items()}
            # one number each when every judge has the same limit, else every judge's (never
            # the strictest one's alone); each family's own in family_limits, every judge's in
            # limits/...
            fams = family_margins(r)
            row["family_limits"] = {f: _num(judge_limit(r.baseline, m)) for f, m in fams.items()}
            row["family_balanced_limits"] = {f: _num(judge_limit(r.balanced_baseline, m))
                                             for f, m in fams.items()}  # fmt: skip
            row["limits"] = {j: _num(v) for j, v in limits.items()}
            row["balanced_limits"] = {j: _num(v) for j, v in bal.items()}
            one = len(set(fams.values())) <= 1
            if limits:
                row["limit"] = _num(min(limits.values())) if one else row["limits"]
                row["balanced_limit"] = _num(min(bal.values())) if one else row["balanced_limits"]
            else:
                row["limit"] = row["balanced_limit"] = None
            # released columns (ids included) whose attackers alone are over their limit
            row["leaking_columns"] = sorted({
                c for j in r.ci_high if (c := column_of(j)) is not None
                and (r.ci_high[j] > limits[j] or r.balanced_ci_high.get(j, 0.0) > bal[j])
            })  # fmt: skip
            row["ci_excess"] = _num(max(
                max((r.ci_high[j] - limits[j] for j in r.ci_high), default=float("nan")),
                max((r.balanced_ci_high[j] - bal[j] for j in r.balanced_ci_high),
                    default=float("nan")),
            ))  # fmt: skip
            # the cell release's bound on any attacker, beside the retrained ones
            row["certificate"] = certificate_block(r)
        else:
            row["retention"] = _num(r.retention)
        row["learning_curve"] = {f: [[_num(a), _num(b)] for a, b in c]
                                 for f, c in r.learning_curve.items()}  # fmt: skip
        row["curve_climbing"] = r.curve_climbing
        row["climbing_families"] = list(r.climbing)
        if r.projected_rows is not None:  # bounds projected to the whole release's attackers
            row["projected_to_rows"] = r.projected_rows
            row["growth"] = {j: _num(v) for j, v in r.growth.items()}
        row["key_compromised"] = (None if r.key_compromised is None else
                                  {f: _num(v) for f, v in r.key_compromised.items()})  # fmt: skip
        if r.key_compromised is not None:  # accuracy gained by holding the key, per family
            row["key_gain"] = {f: _num(v - r.attackers.get(f, float("nan")))
                               for f, v in r.key_compromised.items()}  # fmt: skip
        row["rare_classes"] = dict(r.rare_classes)  # class -> rows, fewer than the folds
        row["pass"] = attribute_passed(result, r.name)
        attrs[r.name] = row
    sup = [r.worst for r in result.reports if r.role == "suppressed"]
    pre = [r.worst for r in result.reports if r.role == "preserved"]
    meta = result.release_meta
    forced = parse_json_list(meta, "mass.forced_columns")
    failed = result.outcome.failed
    return {
        "pass": result.success,
        "rows": result.counts,
        "attributes": attrs,
        # AUM (eq. 5 of the attribute-unlearning paper): strongest judge on the suppressed
        # side as efficacy, weakest preserved attribute as fidelity.
        "aum": _num(aum(max(sup), min(pre))) if sup and pre else None,
        "expectations": {"evaluated": len(result.outcome.expectations), "failed": len(failed)},
        "failed_expectations": [f"{e.suite}: {e.description or e.expectation}" for e in failed],
        "release": {
            "method": meta.get("mass.method"),
            "model": meta.get("mass.model"),
            "model_version": meta.get("mass.model_version"),
            "forced_columns": forced,
            "columns": result.released_columns,
            "id_col": result.id_col,
        },  # fmt: skip
        "seconds": round(result.seconds, 2),
        "policy": result.policy.to_dict() if result.policy is not None else None,
        "key_compromised_status": result.key_status,
        "forced_policy": list(result.forced_policy),
        "warnings": list(result.warnings),
        "rare_classes": {
            "rule": RARE_RULE,
            "attributes": _rare_by_attribute(result),
        },  # fmt: skip
        # what the release keeps beyond the named R (mass.metrics.unnamed, docs/audit.md)
        "unnamed": _rounded(result.unnamed),
        "lineage": lineage(result),
    }


def _rare_by_attribute(result: AuditResult) -> dict[str, dict]:
    """Attribute -> rare class -> rows: the judged attributes', then the watch attributes'
    (their attackers follow the same rule, mass.metrics.strata)."""
    rare = {r.name: dict(r.rare_classes) for r in result.reports if r.rare_classes}
    for w, row in (result.unnamed.get("watch") or {}).items():
        if row.get("rare_classes"):
            rare[w] = dict(row["rare_classes"])
    return rare


def _rounded(v):
    """``v`` with every float rounded as the rest of audit.json (NaN -> null)."""
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_rounded(x) for x in v]
    return _num(v) if isinstance(v, float) else v


def lineage(result: AuditResult) -> dict:
    """Where the audited release came from, as far as its metadata says (may be partial)."""
    meta = result.release_meta
    out: dict = {k.removeprefix("mass."): v for k, v in sorted(meta.items())
                 if k not in ("mass.suppress", "mass.preserve", "mass.forced_columns")}  # fmt: skip
    if "modifier" in out:
        try:
            out["modifier"] = json.loads(out["modifier"])
        except json.JSONDecodeError:
            pass
    out.update({
        **{k: v for k, v in result.sources.items() if v},
        "runner": "mass audit",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "rows": result.counts.get("release"),
    })  # fmt: skip
    return out


def write_report(result: AuditResult, report_dir: str) -> str:
    os.makedirs(report_dir, exist_ok=True)
    path = os.path.join(report_dir, "audit.json")
    with open(path, "w") as f:
        json.dump(audit_metrics(result), f, indent=2, sort_keys=False)
        f.write("\n")
    return path


def write_all(result: AuditResult, report_dir: str, *, chart: bool = True) -> dict:
    """Every output of one audit into ``report_dir``: audit.json, privacy_utility.png (unless
    ``chart`` is false) and report.html beside the Data Docs; returns the audit.json dict.

    The one writer behind `mass audit` and the publication gate of `mass anonymize`.
    """
    path = write_report(result, report_dir)
    if chart:
        from mass.audit.chart import plot_privacy_utility

        plot_privacy_utility(result, os.path.join(report_dir, "privacy_utility.png"))
    from mass.report.html import write_html_report  # report.html + offline Data Docs

    write_html_report(report_dir)
    with open(path) as f:
        return json.load(f)


def format_table(result: AuditResult) -> str:
    """Short fixed-width table of every attribute plus the failed expectations."""
    fams = list(result.reports[0].attackers) if result.reports else []
    head = ["attribute", "role", "major", "floor", "orig", f"{FROZEN}_x", f"{FROZEN}_x'",
            *fams, "worst", "pass"]  # fmt: skip
    lines = ["  ".join(f"{h:>10}" for h in head)]
    for r in result.reports:
        cells = [r.name, r.role, r.majority, r.floor, r.original, r.frozen_x, r.frozen_xprime,
                 *[r.attackers[f] for f in fams], r.worst,
                 "PASS" if attribute_passed(result, r.name) else "FAIL"]  # fmt: skip
        lines.append("  ".join(
            f"{'-' if c is None else (f'{c:.3f}' if isinstance(c, float) else str(c)):>10}"
            for c in cells
        ))  # fmt: skip
    c = result.counts
    lines.append(f"rows: release {c['release']}, labels {c['labels']}, matched {c['matched']}, "
                 f"non-finite {c['nonfinite']}, audited {c['audited']}")  # fmt: skip
    for r in result.reports:
        if r.role != "suppressed":
            continue
        highs = ", ".join(f"{j} {v:.3f}" for j, v in r.ci_high.items())
        lines.append(f"{r.name}: 95% upper bounds (limit {r.baseline:.3f}+margin): {highs}")
        fams = family_margins(r)
        if len(set(fams.values())) > 1:
            lims = ", ".join(f"{f} {judge_limit(r.baseline, m):.3f}" for f, m in fams.items())
            lines.append(f"{r.name}: limits per judge family: {lims}")
        bal = ", ".join(f"{j} {v:.3f}" for j, v in r.balanced_ci_high.items())
        lines.append(f"{r.name}: balanced upper bounds (limit {r.balanced_baseline:.3f}+margin):"
                     f" {bal}")  # fmt: skip
        if r.key_compromised is not None:
            key = ", ".join(f"{f} {v:.3f}" for f, v in r.key_compromised.items())
            lines.append(f"{r.name}: key compromised (noise removed): {key}")
        if (cert := certificate_line(r, certificate_block(r))) is not None:
            lines.append(cert)
    if result.key_status:
        lines.append(f"key-compromised figure: {result.key_status}")
    lines += unnamed_lines(result.unnamed)
    for w in result.warnings:
        lines.append(f"WARNING {w}")
    for e in result.outcome.failed:
        lines.append(f"FAILED {e.suite}: {e.description or e.expectation} -> {e.observed}")
    n = len(result.outcome.expectations)
    verdict = "PASSED" if result.success else "FAILED"
    lines.append(f"audit {verdict}: {n - len(result.outcome.failed)}/{n} expectations met "
                 f"({result.seconds:.1f} s)")  # fmt: skip
    return "\n".join(lines)
