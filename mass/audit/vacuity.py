"""Whether a policy can fail at all on these measurements (:func:`vacuous`): a suppressed
attribute that its preserved attributes nearly determine, or any judge family whose limit no
attacker can exceed, on either scale. The audit refuses such a policy unless
``audit.force_vacuous`` runs it (docs/audit.md)."""

from __future__ import annotations

import numpy as np

from mass.metrics import AttributeReport, family_of
from mass.metrics.rules import judge_limit

CONTRADICTION = 0.9  # preserved labels that predict a suppressed one this well contradict it


def _informative(r: AttributeReport) -> bool:
    """The original embeddings predict the attribute (best attacker 2 standard errors above
    the baseline on either scale): only then does a limit above them come from the policy."""
    se = 2.0 * np.sqrt(r.baseline * (1 - r.baseline) / max(r.n, 1))
    se_b = 2.0 * np.sqrt(r.balanced_baseline * (1 - r.balanced_baseline) / max(r.n, 1))
    bal = r.original_balanced if r.original_balanced is not None else 0.0
    return r.original > r.baseline + se or bal > r.balanced_baseline + se_b


def family_margins(r: AttributeReport) -> dict[str, float]:
    """Each judge family's margin ("frozen" and each attacker family; the remapped,
    key-stripped and column-alone judges of a family share its margin)."""
    out: dict[str, float] = {}
    for judge, m in r.margins.items():
        out.setdefault(family_of(judge), m)
    return out


def _vacuous_judges(r: AttributeReport) -> list[str]:
    """Why one or more judge families of a suppressed attribute cannot fail, loosest first
    (each family is held to its own limit: one that cannot fail lets through whatever only it
    reads, e.g. an XOR that no linear judge sees)."""
    by_margin: dict[float, list[str]] = {}
    for fam, m in family_margins(r).items():
        by_margin.setdefault(m, []).append(fam)
    out = []
    for m in sorted(by_margin, reverse=True):
        limit, bal_limit = judge_limit(r.baseline, m), judge_limit(r.balanced_baseline, m)
        who = f"for judges {', '.join(by_margin[m])}"
        if limit >= 1 and bal_limit >= 1:  # a judge fails on either scale: both must be
            out.append(f"'{r.name}': limit {limit:.3f} >= 1 (baseline {r.baseline:.3f} + "
                       f"margin {m:.3f}) and balanced limit {bal_limit:.3f} >= 1 {who}: no "
                       "attacker can exceed them")  # fmt: skip
        elif _informative(r) and limit >= r.original and bal_limit >= (
                r.original_balanced or 1.0):  # fmt: skip
            out.append(f"'{r.name}': limit {limit:.3f} (balanced {bal_limit:.3f}) {who} is at "
                       "or above the original embeddings' own best attacker "
                       f"{r.original:.3f} (balanced {r.original_balanced:.3f}): nothing can "
                       "fail")  # fmt: skip
        else:
            break  # stricter families cannot be vacuous when a looser one is not
    return out


def vacuous(reports: list[AttributeReport]) -> list[str]:
    """Why the policy cannot fail on these measurements (empty: it can). Per suppressed
    attribute: a preserved attribute that nearly determines it (the leakage floor, the
    preserved labels' own agreement with it, at or above 90 % and above the majority), or ANY
    judge family whose limit is at or above 1, or at or above the original embeddings' own
    best attacker when the original predicts the attribute at all - on both scales (accuracy
    and balanced accuracy), since a judge fails on either. (An attribute the original does
    not predict is left to the judges: a release can still leak it through ids, columns or a
    leaky modifier.)"""
    out = []
    for r in reports:
        if r.role != "suppressed" or not r.margins:
            continue
        m = min(r.margins.values())
        if r.floor > r.majority and r.floor >= CONTRADICTION:
            out.append(f"'{r.name}' is suppressed but the preserved attribute(s) predict it "
                       f"{r.floor:.0%} of the time (leakage floor {r.floor:.3f}, majority "
                       f"{r.majority:.3f}): preserving them contradicts suppressing it (limit "
                       f"{judge_limit(r.baseline, m):.3f})")  # fmt: skip
        else:
            out += _vacuous_judges(r)
    return out
