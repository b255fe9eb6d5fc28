"""Calibration's record: the frontier, the verdict, calibration.json and calibration.png."""

from __future__ import annotations

import json
import logging
import math
import os

from mass.audit.policy import AuditPolicy
from mass.calibrate.judge import Baselines
from mass.metrics import judge_limit
from mass.rundir import CALIBRATION

log = logging.getLogger(__name__)


def frontier(points: list[dict]) -> list[dict]:
    """Best privacy at each utility level: points not beaten on both axes, by utility."""
    pts = [p for p in points if p.get("fraction") is not None and not math.isnan(p["fraction"])]
    pts.sort(key=lambda p: (-p["fraction"], p["excess"]))
    out, best = [], math.inf
    for p in pts:
        if p["excess"] < best - 1e-12:
            best = p["excess"]
            out.append({"candidate": p["candidate"], "noise": p["noise"],
                        "fraction": round(p["fraction"], 4), "excess": round(p["excess"], 4),
                        "passed": p["passed"]})  # fmt: skip
    return out


def baseline_report(base: Baselines, policy: AuditPolicy) -> dict:
    out = {}
    for s in base.suppress:
        margins = policy.margins(s)
        out[s] = {"role": "suppressed", "majority": base.majority[s], "floor": base.floor[s],
                  "original": base.original[s],
                  "limit": {f: judge_limit(base.baseline(s), margins[f])
                            for f in base.original[s]},
                  "judged_on": f"{policy.confidence:.0%} upper bounds of accuracy and of "
                               "balanced accuracy, every family and its re-mapped "
                               "predictions (the audit's rule)"}  # fmt: skip
    for r in base.preserve:
        out[r] = {"role": "preserved", "original": base.original[r], "safety": base.safety[r],
                  "required_fraction": policy.fraction(r) + base.safety[r]}  # fmt: skip
    return out


def report_head(s, sample_note, policy_source, noise_levels) -> dict:
    """calibration.json before any candidate: policy, budget, validation, baselines (``s``:
    the search state, mass.calibrate.search._Search)."""
    audit, policy, base = s.audit, s.policy, s.audit.base
    n_tr = base.n_eval * (audit.folds - 1) // audit.folds
    groups = len(s.folds) or 1  # out of fold: each fold's release is attacked on its own
    n_tr //= groups
    return {
        "policy": policy.to_dict(),
        "policy_source": policy_source,
        "budget_minutes": s.cfg.budget_minutes,
        "budget_clock": s.cfg.budget_clock,
        "validation": {"how": s.val_how, "rows": len(s.val_ds), "train_rows": len(s.fit_ds),
                       "attacker_rows": base.n_eval, "attacker_train_rows": n_tr,
                       "note": "the gate's attackers train on 9/10 of the release (10 folds): "
                               f"a release of more than {n_tr * 10 // 9} "
                               "rows faces attackers trained on more rows than validated",
                       "judge": f"the audit's rule (mass.metrics.attribute_report), "
                                f"{audit.folds}-fold CV"
                                + (f" within each of the {groups} out-of-fold releases "
                                   "(suppressed attributes)" if groups > 1 else "")
                                + f", upper bounds at {audit.confidence:.4f} "
                                f"(the gate's {policy.confidence} widened for the release "
                                f"size: mass.calibrate.judge.validation_z)",
                       "release_rows": s.cfg.release_rows,
                       "families": list(audit.families),
                       "rare_classes": audit.rare_report()},
        "sample": sample_note,
        "noise_levels": list(noise_levels),
        "baselines": baseline_report(base, policy),
        "unnamed_ranking": (f"watch attributes {s.watch}: smallest normalised information kept"
                            if s.watch else "label-free structure within S: mean of kNN "
                            "overlap, linear CKA and distance correlation"),
        "candidates": [],
    }  # fmt: skip


def why(pt: dict, policy: AuditPolicy) -> str:
    return (f"best utility among passing candidates: smallest preserved fraction "
            f"{pt['fraction']:.3f} (policy {policy.min_utility_fraction}), worst judge's upper "
            f"bound {pt['excess']:+.3f} over its baseline (margin "
            f"{min(policy.attacker_margin.values()):.2f})")  # fmt: skip


def _by(p: dict) -> str:
    """Which candidate, at which noise, a frontier figure belongs to."""
    return f", by {p['candidate']} at noise {p['noise']:g}" if p.get("candidate") else ""


def verdict(infeasible: list[str], points: list[dict], policy, base: Baselines,
            lead: str = "no configuration met the policy on validation") -> str:  # fmt: skip
    if infeasible:
        return "infeasible: " + "; ".join(infeasible)
    private = [p for p in points if p["privacy_ok"] and not math.isnan(p["fraction"])]
    useful = [p for p in points if p["utility_ok"]]
    parts = [lead]
    if not points:
        parts.append("nothing was measured within the budget (raise --budget-minutes)")
        return "; ".join(parts)
    if private:
        top = max(private, key=lambda p: p["fraction"])
        need = max((policy.fraction(r) + base.safety[r] for r in base.preserve),
                   default=policy.min_utility_fraction)  # fmt: skip
        parts.append(
            f"the best utility with suppression held was {top['fraction']:.3f} (needs "
            f"{need:.3f}: the policy's fraction + one standard error){_by(top)}"
        )
    if useful:
        top = min(useful, key=lambda p: p["excess"])
        parts.append(
            f"the best privacy with utility kept was {top['excess']:+.3f} "
            f"(worst upper bound over its baseline){_by(top)}"
        )
    if not private and not useful:
        parts.append("looks infeasible within this search: neither half of the policy was met")
    return "; ".join(parts)


def failure_message(report: dict, base: Baselines) -> str:
    lines = [report["verdict"] + "."]
    for s in base.suppress:
        lines.append(f"  {s}: majority {base.majority[s]:.3f}, leakage floor {base.floor[s]:.3f}, "
                     f"original {base.best_original(s):.3f}")  # fmt: skip
    lines.append(
        "  frontier (best privacy at each utility level; excess = worst judge's 95% "
        "upper bound minus its baseline, max(majority, floor) or max(1/k, floor)):"
    )
    for p in report["frontier"] or [{"candidate": "-", "noise": 0, "fraction": float("nan"),
                                      "excess": float("nan")}]:  # fmt: skip
        lines.append(f"    {p['candidate']:<24} noise {p['noise']:<5} utility {p['fraction']:.3f} "
                     f"excess {p['excess']:+.3f}")  # fmt: skip
    # more time helps only a search the budget stopped: an exhausted or infeasible one has
    # nothing left to try
    more = " raise --budget-minutes," if report["stopped"] == "budget" else ""
    lines.append(f"  calibration took {report['seconds']:.0f}s (stopped: {report['stopped']}); "
                 "see calibration.json in the run directory; loosen the policy (--policy),"
                 f"{more} or train an explicit --config")  # fmt: skip
    return "\n".join(lines)


def write_report(out_dir, report, points, chosen, policy) -> None:
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    report["points"] = [
        {k: p[k] for k in ("candidate", "noise", "privacy", "utility", "excess", "fraction",
                           "fidelity", "privacy_ok", "utility_ok", "passed", "complete")
         if k in p} | {"seconds": p.get("seconds")}
        for p in points
    ]  # fmt: skip
    with open(os.path.join(out_dir, CALIBRATION), "w") as f:
        json.dump(report, f, indent=2, default=float)
    try:
        plot_frontier(os.path.join(out_dir, "calibration.png"), points, chosen, policy,
                      seconds=report["seconds"])  # fmt: skip
    except Exception as e:  # the chart is a convenience; the JSON is the record
        log.warning("calibration chart not written: %s", e)


def plot_frontier(path, points, chosen, policy: AuditPolicy, *, seconds: float) -> None:
    """Utility (smallest preserved fraction) vs privacy excess, one colour per candidate,
    with the policy's margin and min_utility_fraction as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    names = list(dict.fromkeys(p["candidate"] for p in points))
    for name in names:
        pts = [p for p in points if p["candidate"] == name and not math.isnan(p["fraction"])]
        ax.scatter([p["fraction"] for p in pts], [p["excess"] for p in pts], label=name, s=22)
    if chosen:
        sel = [p for p in points if (p["candidate"], p["noise"]) == chosen]
        ax.scatter([sel[-1]["fraction"]], [sel[-1]["excess"]], s=160, facecolors="none",
                   edgecolors="k", label="chosen")  # fmt: skip
    ax.axhline(min(policy.attacker_margin.values()), color="r", ls="--", lw=1,
               label="privacy margin")  # fmt: skip
    ax.axvline(policy.min_utility_fraction, color="g", ls="--", lw=1, label="min utility")
    ax.set_xlabel("smallest preserved fraction of original accuracy (higher is better)")
    ax.set_ylabel("worst judge's upper bound - its baseline (lower is better)")
    ax.set_title(f"calibration frontier ({seconds:.0f}s)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
