"""Calibration's rules beside the search: when the request is infeasible, when the validation
rows are too few, when the one-round linear erasers are useless, how passing candidates rank
and when a release keeps too little of the watch attributes (docs/calibration.md)."""

from __future__ import annotations

from mass.audit.policy import AuditPolicy
from mass.calibrate.judge import Baselines

LINEAR_ERASER = "leace_iterated"


def nonlinear_leak(points: list[dict], name: str) -> str | None:
    """Why the remaining one-round linear erasers are skipped, or None: at the highest noise
    measured the linear judges (logistic regression, re-mapped or not) pass and only
    non-linear ones read S. A one-round LEACE removes linear information of S only (``|R``
    less of it), so it cannot remove what is left. The iterated variants (``rounds`` > 1) are
    still tried: they refit on the renormalised output, where renormalisation has written S
    back non-linearly (docs/journal/calibration-runs.md: skipping them too lost a passing
    candidate); then the quadratic eraser and the trained candidates."""
    if not points:
        return None
    top = max(points, key=lambda p: p["noise"])
    judges = [(j, v["ok"]) for s in top.get("privacy", {}).values() for j, v in s.items()]
    linear = [ok for j, ok in judges if j.startswith("logreg")]
    failing = sorted({j for j, ok in judges if not ok})
    if not linear or not all(linear) or not failing:
        return None
    return (
        f"{name} at noise {top['noise']}: the linear judges pass, {failing} still read "
        "the suppressed attribute; a linear eraser cannot remove non-linear information"
    )


def rank_key(pt: dict) -> tuple:
    """Rank of a passing point: utility nobody named first (to 0.01: closer is noise), then,
    under ``audit.gate_certificate``, the lower certified bound (to 0.01; ``certificate``,
    :mod:`mass.calibrate.certified`), the named preserved fraction, fidelity to x, less
    noise."""
    kept = (pt.get("unnamed") or {}).get("utility")
    cert = pt.get("certificate")
    return (-1.0 if kept is None else round(kept, 2),
            0.0 if cert is None else -round(float(cert), 2), round(pt["fraction"], 6),
            round(pt["fidelity"], 6), -pt["noise"])  # fmt: skip


def infeasible_attributes(base: Baselines, policy: AuditPolicy) -> list[str]:
    """Suppressed attributes the preserved labels already give away as well as the data does:
    no release that keeps R can hide them, so the request is refused rather than passed
    vacuously (the floor would make any release, even x itself, 'pass')."""
    out = []
    if not base.preserve:
        return out
    for s in base.suppress:
        margin = min(policy.margins(s).values())
        gap = base.best_original(s) - base.floor[s]
        if base.floor[s] > base.majority[s] + margin and gap <= margin:
            out.append(
                f"{s}: the preserved labels {base.preserve} alone predict it at "
                f"{base.floor[s]:.3f} (floor), the original embeddings at "
                f"{base.best_original(s):.3f}; keeping them keeps {s}"
            )
    return out


def rows_needed(base: Baselines, policy: AuditPolicy, confidence: float,
                labels: dict | None = None) -> dict[str, int]:  # fmt: skip
    """Suppressed attributes whose validation rows are too few for the policy's margin at the
    validation ``confidence`` (the audit's own warning, mass.audit.runner.min_rows; with the
    validation rows' ``labels``, the balanced judges' need at their class shares too):
    attribute -> rows needed."""
    from mass.audit.runner import class_counts, min_rows

    labels = labels or {}
    need = {s: min_rows(base.baseline(s), min(policy.margins(s).values()), confidence,
                        class_counts(labels.get(s)))
            for s in base.suppress}  # fmt: skip
    return {s: n for s, n in need.items() if base.n_eval < n}


def rarest_note(y) -> str:
    """``, its rarest class N of the M rows`` for labels ``y`` of several classes (else "")."""
    from mass.audit.runner import class_counts

    counts = class_counts(y)
    if len(counts) < 2:
        return ""
    return f", its rarest class {int(counts.min())} of the {int(counts.sum()):,} rows"


def rare_class(y) -> bool:
    """Whether the labels ``y`` have a class under half of an even share (1 / 2k of the rows):
    then the balanced judges' need, not the accuracy judges', sets the rows (min_rows)."""
    from mass.audit.runner import class_counts

    counts = class_counts(y)
    return len(counts) >= 2 and 2 * len(counts) * int(counts.min()) < int(counts.sum())


def watch_shortfall(policy: AuditPolicy, unnamed: dict) -> str | None:
    """Why a release fails ``audit.watch_min_kept`` on validation (None: it does not)."""
    if policy.watch_min_kept is None:
        return None
    low = {w: r["kept"] for w, r in (unnamed.get("watch") or {}).items()
           if r["kept"] is not None and r["kept"] < policy.watch_min_kept}  # fmt: skip
    if not low:
        return None
    return (
        f"watch attributes keep less than audit.watch_min_kept "
        f"{policy.watch_min_kept:g}: " + ", ".join(f"{w} {k:.2f}" for w, k in low.items())
    )
