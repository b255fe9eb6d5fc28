"""The validation audit: the publication gate's own rule, applied to a candidate's release.

A suppressed attribute is judged by :func:`mass.metrics.attribute_report` - the function the
audit (``mass audit`` / ``mass anonymize``'s gate) calls - with the policy's margins and
families: every retrained family and its re-mapped predictions must keep the upper bound of
its accuracy within max(majority, floor) + margin and of its balanced accuracy within
max(1/k, balanced floor) + margin (:meth:`AttributeReport.passed`). The bounds are taken 1.645
standard errors further out than the gate's (``SAFETY_SE``: z = 3.60 instead of 1.96 at 95 %)
when the release is audited on as many rows as validation's attackers; for another release
size (``CalibrationConfig.release_rows``) see :func:`validation_z`. Validation's attackers
train on fewer rows than the gate's attackers of the whole release (a cap, and out of fold
within one fold's release): their bounds are projected to the release's training rows along
each judge's learning curve (:mod:`mass.metrics.growth`).
A preserved attribute must keep ``policy.fraction(r)`` of its original accuracy (point
estimates, as the gate) plus one standard error of that fraction on the validation rows.
Other differences from the gate: attackers are cross-validated with ``min(policy.folds, 5)``
folds on at most ``cfg.attacker_rows`` rows, and the frozen branch judge (MaSS runs only) is
not rerun here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mass.audit.policy import AuditPolicy
from mass.config import CalibrationConfig
from mass.io import EmbeddingDataset
from mass.metrics import AttributeReport, attack_predictions, attribute_report, preserved_ok
from mass.metrics.rules import FROZEN_READER, baseline_of
from mass.rows import joint_codes, seeded_rows

STRUCTURE_ROWS = 2000  # k-NN within S classes holds an n x n matrix per class

# Validation bounds sit this many standard errors beyond the gate's. The gate judges the
# release: other rows, noise of its own, so its point estimate differs from validation's by
# N(0, se_val^2 + se_rel^2). With validation at p_val + (z_gate + k) se <= limit and a release
# as large as the validation set, a borderline validation pass fails its gate with probability
# P(N(0,1) > k / sqrt(2)): k = 1 -> 24 %, k = 1.645 -> 12 %, k = 2.33 -> 5 %. At k = 1
# validation passes failed their gate, at k = 2.33 the demo's validation rows were too few
# for any candidate (docs/journal/calibration-runs.md); k = 1.645 is the compromise.
SAFETY_SE = 1.645


def validation_z(z_gate: float, n_val: int, n_release: int | None) -> float:
    """The z of the validation bounds for a release the gate audits on ``n_release`` rows
    (None: as many as ``n_val``, the validation rows the attackers are scored on).

    The gate passes a judge when p_rel + z_gate se_rel <= limit. Its point estimate differs
    from validation's by N(0, se_val^2 + se_rel^2), so a validation pass with
    p_val + z_gate se_rel + k sqrt(se_val^2 + se_rel^2) <= limit fails its gate with
    probability P(N(0,1) > k). In units of se_val, with rho = se_rel / se_val =
    sqrt(n_val / n_release): z = z_gate rho + k sqrt(1 + rho^2), k = SAFETY_SE / sqrt 2
    (12 %), which is z_gate + SAFETY_SE at rho = 1. A larger release does not narrow it
    (rho >= 1): its attackers also train on more rows and read more (what they gain is
    projected separately, along the learning curve), so only a smaller release moves it."""
    rho = 1.0 if not n_release else max(1.0, math.sqrt(n_val / max(int(n_release), 1)))
    return z_gate * rho + SAFETY_SE / math.sqrt(2.0) * math.sqrt(1.0 + rho * rho)


def validation_confidence(confidence: float, n_val: int, n_release: int | None) -> float:
    """The two-sided confidence of the validation bounds at :func:`validation_z`, for the
    gate's ``confidence`` and a release it audits on ``n_release`` rows."""
    from mass.metrics.scores import z_value

    return float(2 * norm_cdf(validation_z(z_value(confidence), n_val, n_release)) - 1)


# The attacker families in the order utility is measured: cheapest first, so a preserved
# attribute stops being measured as soon as one family keeps it.
COST_ORDER = ("logreg", "knn", "gboost", "mlp")
MAX_FOLDS = 5


@dataclass
class Baselines:
    """What the validation audit compares against, measured once on the original rows."""

    suppress: list[str]
    preserve: list[str]
    majority: dict[str, float]
    floor: dict[str, float]
    original: dict[str, dict[str, float]]  # attribute -> family -> accuracy on x
    n_eval: int
    safety: dict[str, float]  # preserved: one standard error, in fraction units
    # suppressed: max(1/k, balanced floor) on every attackers' row
    balanced_baseline: dict[str, float] = field(default_factory=dict)

    def best_original(self, a: str) -> float:
        return max(self.original[a].values())

    def baseline(self, s: str) -> float:
        return baseline_of(self.majority[s], self.floor[s])


def excess(r: AttributeReport) -> float:
    """The privacy axis: the worst judge's upper bound above its baseline, on both scales
    (what the gate's expectation reports as 'worst upper bound over its baseline')."""
    return max(max(r.ci_high[j] - r.baseline, r.balanced_ci_high.get(j, -1.0)
                   - r.balanced_baseline) for j in r.ci_high)  # fmt: skip


def judge(
    privacy: dict[str, AttributeReport],
    utility: dict[str, dict[str, float]],
    base: Baselines,
    policy: AuditPolicy,
) -> dict[str, Any]:
    """The policy on one validation release.

    ``privacy``: suppressed attribute -> its audit report on the release (the gate's rule:
    :meth:`AttributeReport.passed`); ``utility``: preserved attribute -> family -> accuracy
    (families may be partial: the search stops measuring once one keeps the fraction).
    Returns ``privacy_ok``, ``utility_ok`` (None when an attribute was not measured),
    ``passed``, ``excess`` (worst upper bound over its baseline, the privacy axis) and
    ``fraction`` (smallest preserved fraction of the original accuracy, the utility axis;
    1.0 with nothing preserved).
    """
    privacy_ok, worst = True, -1.0
    for s in base.suppress:
        r = privacy.get(s)
        if r is None or not r.attackers:
            privacy_ok = False
            continue
        worst = max(worst, excess(r))
        privacy_ok = privacy_ok and r.passed
    fraction, utility_ok = 1.0, True
    for r in base.preserve:
        accs = utility.get(r)
        if not accs:
            utility_ok, fraction = None, float("nan")
            break
        orig = base.best_original(r)
        fraction = min(fraction, max(accs.values()) / max(orig, 1e-12))
        if not preserved_ok(max(accs.values()), orig, policy.fraction(r) + base.safety[r]):
            utility_ok = False
    return {"privacy_ok": bool(privacy_ok), "utility_ok": utility_ok,
            "passed": bool(privacy_ok and utility_ok), "excess": worst,
            "fraction": fraction}  # fmt: skip


class ValidationAudit:
    """Attackers retrained on a validation release, judged by the gate's rule (module doc)."""

    def __init__(self, val: EmbeddingDataset, suppress, preserve, policy: AuditPolicy,
                 cfg: CalibrationConfig, folds: int | None = None,
                 watch: list[str] | tuple[str, ...] = (), fold_rows=()):  # fmt: skip
        from mass import metrics as M
        from mass.noise import row_seeds
        from mass.rows import normalize_rows

        self.suppress, self.preserve, self.policy, self.cfg = suppress, preserve, policy, cfg
        self.families = [f for f in COST_ORDER if f in policy.families]
        # attackers' CV folds: min(policy.folds, 5) unless given (a holdout validation uses the
        # gate's own count, so its attackers train on the same share of the rows, 9/10)
        self.folds = int(folds) if folds else min(policy.folds, MAX_FOLDS)
        self.x = normalize_rows(val.x)
        # public seeds: calibration only needs noise of the right distribution; the release
        # draws its noise from the owner's keyed seeds
        self.seeds = row_seeds(val.ids)
        n = len(val)
        # the rows the attackers see (seeded cap): every measurement uses the same ones
        keep = seeded_rows(n, cfg.attacker_rows, cfg.seed + 1)
        self.rows = np.arange(n) if keep is None else keep
        self.watch = list(watch)  # ranks the passing candidates (mass.metrics.unnamed)
        # out of fold (``fold_rows``: the search's folds): the fold of each validation row. A
        # suppressed attribute's attackers are then cross-validated within each fold's release
        # only - one fitted model's output, as the gate sees one - because attackers trained
        # across four models' outputs miss what each fit leaves (docs/calibration.md, "one map
        # per attack")
        self.groups: np.ndarray | None = None
        if len(fold_rows):
            self.groups = np.empty(n, dtype=np.int64)
            for k, rows in enumerate(fold_rows):
                self.groups[rows] = k
        self.labels = {a: val.labels[a][self.rows] for a in [*suppress, *preserve, *watch]}
        self.names = {a: e.classes for a, e in val.encodings.items()}
        # the gate's attackers see at most policy.max_rows of the release
        n_rel = (None if cfg.release_rows is None else
                 min(cfg.release_rows, policy.max_rows or cfg.release_rows))  # fmt: skip
        self.gate_rows = n_rel
        # the rows the gate's attackers of the whole release train on: the suppressed judges'
        # bounds are projected there along their learning curves (mass.metrics.growth), since
        # validation's attackers train on fewer (a cap, and one fold's release out of fold)
        n_all = cfg.release_rows or n
        self.release_training_rows = n_all * (policy.folds - 1) / policy.folds
        self.confidence = validation_confidence(policy.confidence, len(self.rows), n_rel)
        x = self.x[self.rows]
        original = {}
        for a, y in self.labels.items():
            preds = attack_predictions(x, y, families=self.families, folds=self.folds,
                                       seed=cfg.seed)  # fmt: skip
            original[a] = {f: float((p[1.0] == y).mean()) for f, p in preds.items()}
        majority, floor, safety, balanced = {}, {}, {}, {}
        pres = {r: self.labels[r] for r in preserve}
        for s in suppress:
            majority[s] = M.majority_rate(self.labels[s])
            floor[s] = M.leakage_floor(self.labels[s], pres, folds=self.folds, seed=cfg.seed)
            balanced[s] = baseline_of(
                M.chance_level(self.labels[s]),
                M.leakage_floor(
                    self.labels[s], pres, folds=self.folds, seed=cfg.seed, balanced=True
                ),
            )
        n_eval = len(self.rows)
        for r in preserve:
            best = max(original[r].values())
            q = min(0.99, best * policy.fraction(r))
            safety[r] = max(0.01, math.sqrt(q * (1 - q) / max(n_eval, 1)) / max(best, 1e-6))
        self.base = Baselines(list(suppress), list(preserve), majority, floor, original,
                              n_eval, safety, balanced)  # fmt: skip

    def rare_report(self) -> dict:
        """The rare classes and S x R cells of the validation rows, and the rule that judged
        them (calibration.json's validation.rare_classes)."""
        from mass.metrics.strata import rare_report

        return rare_report(self.labels, self.folds, names=self.names,
                           joint=[*self.suppress, *self.preserve])  # fmt: skip

    def report(self, xp: np.ndarray, attr: str, role: str, families) -> AttributeReport:
        """The gate's audit row of ``attr`` on the release ``xp`` (validation rows)."""
        pol = self.policy
        return attribute_report(
            attr, self.labels[attr], self.x[self.rows], xp[self.rows], role=role,
            preserved={r: self.labels[r] for r in self.preserve} if role == "suppressed" else None,
            margins=pol.margins(attr), min_fraction=pol.fraction(attr),
            families=tuple(families), folds=self.folds, seed=self.cfg.seed,
            confidence=self.confidence, curve=False,
            original=self.base.original[attr], class_names=self.names.get(attr),
            groups=(self.groups[self.rows]
                    if self.groups is not None and role == "suppressed" else None),
            project_rows=self.release_training_rows if role == "suppressed" else None,
        )  # fmt: skip

    def lookups(self, x: np.ndarray, xp: np.ndarray, labels, groups: np.ndarray,
                project_rows: float | None = None) -> dict[str, AttributeReport]:  # fmt: skip
        """The gate's lookups on released values alone (no family), per suppressed attribute,
        on the rows ``x`` (normalised) released as ``xp`` with their ``labels``: learned
        within each ``groups`` code (one fitted model's release), held to the strictest
        family's margin as the gate holds them, their bounds projected to ``project_rows``
        training rows when given (:mod:`mass.metrics.growth`); an attribute is left out when
        no released vector repeats. The bounds are validation's (:func:`validation_z`) for
        ``len(x)`` scored rows: where the gate audits fewer, as wide as its own on those
        (docs/calibration.md, "The lookup at the release's shape")."""
        confidence = validation_confidence(self.policy.confidence, len(x), self.gate_rows)
        out = {}
        for s in self.suppress:
            margins = self.policy.margins(s)
            r = attribute_report(
                s, labels[s], x, xp, role="suppressed",
                preserved={p: labels[p] for p in self.preserve},
                margins=min(margins[f] for f in self.families), families=(),
                folds=self.folds, seed=self.cfg.seed, confidence=confidence,
                curve=False, original=self.base.original[s], groups=groups,
                project_rows=project_rows)  # fmt: skip
            if r.ci_high:
                out[s] = r
        return out

    def clearly_fails(self, model, rows: np.ndarray) -> str | None:
        """The first fold's verdict, before the other folds are fitted: one fitted model's
        release (noise 0) of its own validation ``rows``, judged by the two cheapest families,
        their re-mapped twins and the lookups, on that fold's attackers' rows. The leak it
        names (None: none) has the judge's estimate more than the gate's z standard errors
        over its limit on this one fold; the pooled validation (whose attackers also train
        within one fold's release) passes only at validation's z of its own, narrower,
        standard errors under it, which such a fold leaves at odds of about 1 in 10^5
        (docs/calibration.md, "A first fold that clearly fails")."""
        from mass.calibrate.noise import released
        from mass.metrics.rules import judge_ok
        from mass.metrics.scores import z_value

        keep = np.flatnonzero(np.isin(self.rows, rows))
        if len(keep) < 4 * self.folds:
            return None
        idx = self.rows[keep]
        xp = released([(model, np.arange(len(idx)))], self.x[idx], self.seeds[idx], 0.0)
        # the reports' bounds are validation's (z_val); the lower ones are taken at the gate's
        shrink = z_value(self.policy.confidence) / z_value(self.confidence)

        def low(point: float | None, high: float | None) -> float | None:
            return None if point is None or high is None else point - (high - point) * shrink

        for s in self.suppress:
            base, bal_base = self.base.baseline(s), self.base.balanced_baseline[s]
            r = attribute_report(
                s, self.labels[s][keep], self.x[idx], xp, role="suppressed",
                preserved={p: self.labels[p][keep] for p in self.preserve},
                margins=self.policy.margins(s), families=tuple(self.families[:2]),
                folds=self.folds, seed=self.cfg.seed, confidence=self.confidence,
                curve=False, original=self.base.original[s],
                class_names=self.names.get(s))  # fmt: skip
            for j, acc in r.accuracies.items():
                if j not in r.ci_high:
                    continue
                a_low = low(acc, r.ci_high[j])
                bal = r.balanced.get(j)
                b_low = low(bal, r.balanced_ci_high.get(j))
                # the limits at least the pooled validation's (a floor read on one fold's rows
                # can read lower than on all of them)
                base_j, bal_j = max(r.baseline, base), max(r.balanced_baseline, bal_base)
                if not judge_ok(a_low, base_j, b_low, bal_j, r.margins[j]):
                    nan = float("nan")
                    return (f"fails on its first fold alone: {s}: {j} {acc:.3f} (lower bound "
                            f"{a_low:.3f}), balanced {nan if bal is None else bal:.3f} (lower "
                            f"bound {nan if b_low is None else b_low:.3f}), limits "
                            f"{base_j + r.margins[j]:.3f} ({bal_j + r.margins[j]:.3f}) on "
                            f"{len(idx)} rows; "
                            "the other folds not fitted")  # fmt: skip
        return None

    def measure(self, xp: np.ndarray, *, full: bool = False, known: dict | None = None
                ) -> dict[str, Any]:  # fmt: skip
        """Privacy (every family: the gate's verdict, and the frontier's exact privacy axis)
        and utility (stops once a family keeps the required fraction unless ``full``: then a
        lower bound); measurements in ``known`` (the same release, measured earlier) are
        reused."""
        base, pol = self.base, self.policy
        known = known or {}
        reports = dict(known.get("reports", {}))
        for s in self.suppress:
            if s not in reports:
                reports[s] = self.report(xp, s, "suppressed", self.families)
        utility: dict[str, dict[str, float]] = {}
        for r in self.preserve:
            utility[r] = dict(known.get("utility", {}).get(r, {}))
            need = (pol.fraction(r) + base.safety[r]) * base.best_original(r)
            for fam in self.families:
                if not full and utility[r] and max(utility[r].values()) >= need:
                    break
                if fam not in utility[r]:
                    utility[r][fam] = self.report(xp, r, "preserved", (fam,)).attackers[fam]
        fidelity = float(np.mean(np.sum(self.x * xp, axis=1)))
        verdict = judge(reports, utility, base, pol)
        privacy = {s: summary(rep) for s, rep in reports.items()}
        return {**verdict, "privacy": privacy, "utility": utility, "fidelity": fidelity,
                "reports": reports, "complete": bool(full)}  # fmt: skip

    def unnamed(self, xp: np.ndarray) -> dict[str, Any]:
        """What the release ``xp`` keeps beyond R on the attackers' rows: the watch attributes
        (originals measured once, in ``__init__``), the label-free structure within S, and
        the one number the search ranks by (``utility``, ``by``). A watch attribute is read as
        the audit reads it, by retrained attackers and by the frozen reader (a model of the
        original rows applied to the release; ``kept`` is the lower), on one fold order."""
        from mass.metrics.unnamed import structure_kept, unnamed_utility, watch_report

        x, r = self.x[self.rows], xp[self.rows]
        sup = {s: self.labels[s] for s in self.suppress}
        watch = watch_report(x, r, {w: self.labels[w] for w in self.watch}, sup,
                             seed=self.cfg.seed, max_rows=None, families=self.families,
                             folds=self.folds,
                             original={w: self.base.original[w] for w in self.watch},
                             names=self.names, frozen=FROZEN_READER,
                             ) if self.watch else {}  # fmt: skip
        structure = structure_kept(x, r, joint_codes(sup), seed=self.cfg.seed,
                                   max_rows=STRUCTURE_ROWS)  # fmt: skip
        by = "watch" if any(w["kept"] is not None for w in watch.values()) else "structure"
        return {"utility": unnamed_utility(watch, structure), "by": by, "watch": watch,
                "structure": structure}  # fmt: skip


def summary(r: AttributeReport) -> dict[str, Any]:
    """A suppressed attribute's judges as calibration.json records them."""
    out = {j: {"accuracy": round(r.accuracies[j], 4), "ci_high": round(r.ci_high[j], 4),
               "balanced_ci_high": round(r.balanced_ci_high.get(j, float("nan")), 4),
               "limit": round(r.baseline + r.margins[j], 4),
               "balanced_limit": round(r.balanced_baseline + r.margins[j], 4),
               "ok": r.judge_ok(j)} for j in r.ci_high}  # fmt: skip
    for j, rise in r.growth.items():  # the bounds above include the projected growth
        out[j]["growth"] = rise
    return out


def norm_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
