"""Reading audit.json for display: every field optional, wrong types shown as missing.

audit.json is written by :func:`mass.audit.report.audit_metrics`; newer audits add fields
(``balanced``, ``chance``, ``limit``, ``ci_high``, ``learning_curve``, ``key_compromised``,
``policy``, ``lineage``, ...). The page shows whatever is there and never fails on a field
that an older (or newer) audit lacks.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from mass import fs
from mass.errors import InputError, MissingInputError

AUDIT_NAME = "audit.json"


def read_audit(report_dir: str) -> dict:
    """audit.json of a report directory (or a release whose audit sits beside it)."""
    path = os.path.join(report_dir, AUDIT_NAME)
    if not os.path.exists(path):
        raise MissingInputError(
            f"{path}: no audit.json; run `mass audit --report {report_dir}` first (or pass the "
            "report directory the audit wrote)"
        )
    doc = fs.read_json_object(path, remedy="re-run `mass audit`")
    if not isinstance(doc.get("pass"), bool):  # a page saying "nothing failed" would mislead
        raise InputError(f"{path}: no verdict in it (no boolean 'pass'): not an audit.json "
                         "`mass audit` wrote; re-run `mass audit`")  # fmt: skip
    return doc


def num(v: Any) -> float | None:
    """A finite float, or None for anything else (missing, null, NaN, text, bool)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def fmt(v: Any, digits: int = 3) -> str:
    x = num(v)
    return "\u2014" if x is None else f"{x:.{digits}f}"


def attributes(audit: Mapping) -> dict[str, dict]:
    attrs = audit.get("attributes")
    if not isinstance(attrs, Mapping):
        return {}
    return {str(k): dict(v) for k, v in attrs.items() if isinstance(v, Mapping)}


def by_role(audit: Mapping, role: str) -> dict[str, dict]:
    return {k: v for k, v in attributes(audit).items() if v.get("role") == role}


def _mapping(row: Mapping, key: str) -> dict[str, Any]:
    v = row.get(key)
    return dict(v) if isinstance(v, Mapping) else {}


def judges(row: Mapping) -> dict[str, float | None]:
    """Judge -> accuracy on the release: the frozen branch model (if any), then each family."""
    # imported here: mass.metrics loads scikit-learn and torch (~1 CPU-s), which the anonymize
    # job's datasheet (written from this module) never needs unless an audit is rendered
    from mass.metrics import ATTACKER_FAMILIES, FROZEN

    out: dict[str, float | None] = {}
    if num(row.get("frozen_xprime")) is not None:
        out[FROZEN] = num(row["frozen_xprime"])
    extra = [*_mapping(row, "balanced"), *_mapping(row, "ci_high")]
    for fam in dict.fromkeys([*ATTACKER_FAMILIES, *extra]):
        if fam == FROZEN or fam in out:
            continue
        if fam in row or fam in extra:
            out[fam] = num(row.get(fam))
    return out


def per_judge(row: Mapping, key: str, judge: str) -> float | None:
    return num(_mapping(row, key).get(judge))


def limit(row: Mapping, key: str, judge: str) -> float | None:
    """``limit`` / ``balanced_limit``: one number for every judge, or a mapping per judge."""
    v = row.get(key)
    return num(v.get(judge)) if isinstance(v, Mapping) else num(v)


def family_limits(row: Mapping, key: str = "family_limits") -> dict[str, float | None] | None:
    """Each judge family's own limit when they differ (mixed margins), else None (one limit,
    ``limit``, holds for every judge)."""
    fams = row.get(key)
    if not isinstance(fams, Mapping) or len({num(v) for v in fams.values()}) <= 1:
        return None
    return {str(f): num(v) for f, v in fams.items()}


def limit_text(row: Mapping, key: str = "limit") -> str:
    """A suppressed attribute's limit as text: one number, or each family's own."""
    fams = family_limits(row, "family_balanced_limits" if key == "balanced_limit" else
                         "family_limits")  # fmt: skip
    if fams is not None:
        return "per judge family: " + ", ".join(f"{f} {fmt(v)}" for f, v in fams.items())
    return "per judge, below" if isinstance(row.get(key), Mapping) else fmt(row.get(key))


def min_fraction(audit: Mapping, name: str) -> float | None:
    """A preserved attribute's required retention: its own field, else from the policy."""
    row = attributes(audit).get(name, {})
    if num(row.get("min_fraction")) is not None:
        return num(row["min_fraction"])
    pol = audit.get("policy")
    if not isinstance(pol, Mapping):
        return None
    over = pol.get("preserve")
    if isinstance(over, Mapping) and num(over.get(name)) is not None:
        return num(over[name])
    return num(pol.get("min_utility_fraction"))


def curve(row: Mapping, family: str) -> list[tuple[float, float]]:
    """A learning curve's finite (fraction, accuracy) points."""
    pts = _mapping(row, "learning_curve").get(family)
    out = []
    for p in pts if isinstance(pts, list) else []:
        if isinstance(p, list | tuple) and len(p) == 2:
            f, a = num(p[0]), num(p[1])
            if f is not None and a is not None:
                out.append((f, a))
    return out


def curves(row: Mapping) -> dict[str, list[tuple[float, float]]]:
    return {f: c for f in _mapping(row, "learning_curve") if (c := curve(row, f))}


def key_compromised(row: Mapping) -> dict[str, float | None]:
    return {str(k): num(v) for k, v in _mapping(row, "key_compromised").items()}


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested mappings as (dotted key, text) rows; lists and scalars as compact JSON."""
    if isinstance(value, Mapping):
        rows: list[tuple[str, str]] = []
        for k, v in value.items():
            rows += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return rows
    if isinstance(value, str):
        return [(prefix, value)]
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        text = str(value)
    return [(prefix, text)]


def certificate_text(row: Mapping[str, Any]) -> str | None:
    """A suppressed attribute's certificate in words (audit.json ``certificate``, docs/audit.md
    "Certificate"); None when the audit computed none (older audit.json)."""
    c = row.get("certificate")
    if not isinstance(c, Mapping):
        return None
    if not c.get("certified"):
        return f"none: {c.get('reason') or 'not certified'}"
    conf = 1.0 - (num(c.get("delta")) or 0.05)
    within = {True: "within the limit", False: "OVER the limit"}.get(c.get("within_limit"), "")
    gated = "judged" if c.get("gated") else "reported, not judged"
    text = (
        f"any attacker's accuracy <= {fmt(c.get('accuracy'))}, balanced <= "
        f"{fmt(c.get('balanced'))} ({conf:.0%}; {c.get('cells')} cells, {c.get('rows')} "
        f"rows; {', '.join(x for x in (within, gated) if x)})"
    )
    w = c.get("resolution_plan")
    if isinstance(w, Mapping):
        text += (f"; resolution alone (cells independent of S): within the margin, "
                 f"{c.get('cells')} cells need about {w.get('rows_needed')} audited rows, "
                 f"these rows allow about {w.get('cells_allowed')} cells")  # fmt: skip
    return text


def unjudged_key_view(audit: Mapping[str, Any], row: Mapping[str, Any]) -> str | None:
    """Why a suppressed attribute failed closed for want of a key-compromised figure (the
    policy gates that view and none was computed: its bounds on the release may all be within
    the limit), or None."""
    gated = bool((audit.get("policy") or {}).get("gate_key_compromised"))
    if row.get("pass") or row.get("role") != "suppressed" or not gated:
        return None
    if row.get("key_compromised") is not None:
        return None
    return str(audit.get("key_compromised_status") or "not computed")
