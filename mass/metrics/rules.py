"""The audit's rules in one place: suppression and preservation checks, a judge's limit and
name grammar, and the per-attribute report (:class:`AttributeReport`) that
:func:`mass.metrics.judges.attribute_report` builds and the gate, `mass audit` and calibration
all judge by."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mass.metrics.certificate import Certificate
from mass.metrics.scores import FROZEN


def utility_retention(acc_modified: float, acc_original: float) -> float:
    """Fraction of the original accuracy kept after modification (may exceed 1)."""
    if acc_original <= 0:
        raise ValueError(f"acc_original must be > 0 to measure retention, got {acc_original}")
    return float(acc_modified) / float(acc_original)


def aum(efficacy: float, fidelity: float) -> float:
    """Attribute Unlearning Measure (Guo et al., 'Efficient Attribute Unlearning', eq. 5).

    AUM = 2 * E * F / (E + F): the harmonic mean of the efficacy score and the fidelity.
    ``efficacy`` is the attacker's accuracy on the unlearnt attribute (lower is better) and
    enters as E = 1 - efficacy: that reading reproduces the paper's Table 1 (efficacy
    0.1352, fidelity 0.7950 -> AUM 0.8284). ``fidelity`` is the main-task accuracy.
    """
    e, f = 1.0 - float(efficacy), float(fidelity)
    return 0.0 if e + f <= 0 else 2.0 * e * f / (e + f)


def baseline_of(rate: float, floor: float) -> float:
    """A suppression judge's baseline on one scale: the rate with no signal (the majority
    rate, or chance 1/k on the balanced scale) or the leakage floor from the preserved
    attributes on that scale, whichever is higher (docs/audit.md)."""
    return max(rate, floor)


def judge_limit(baseline: float, margin: float) -> float:
    """A suppression judge's limit on one scale: its baseline plus the policy's margin."""
    return baseline + margin


def suppressed_ok(accuracy: float, baseline: float, margin: float) -> bool:
    """The suppression rule: a judge may not beat its baseline by more than margin.

    The audit passes a judge's 95 % upper bound as ``accuracy`` (accuracy against
    max(majority, floor), balanced accuracy against max(1/k, balanced floor)).
    """
    return accuracy <= judge_limit(baseline, margin) + 1e-12


def judge_ok(
    ci_high: float,
    baseline: float,
    balanced_ci_high: float | None,
    balanced_baseline: float,
    margin: float,
) -> bool:
    """One suppression judge on both scales (the rule of docs/audit.md, in one place): the
    upper bound of its accuracy within ``baseline`` + margin and, when measured, of its
    balanced accuracy within ``balanced_baseline`` + margin. A NaN bound fails."""
    ok = suppressed_ok(ci_high, baseline, margin)
    if balanced_ci_high is not None:
        ok = ok and suppressed_ok(balanced_ci_high, balanced_baseline, margin)
    return bool(ok)


def preserved_ok(accuracy: float, original: float, min_fraction: float) -> bool:
    """The preservation rule: keep at least ``min_fraction`` of the original accuracy."""
    return original <= 0 or utility_retention(accuracy, original) >= min_fraction - 1e-12


# A preserved attribute's frozen reading (a model trained on the original rows, applied
# unchanged to the release) must keep min_fraction - FROZEN_SLACK of what it reads on the
# original (docs/audit.md, "Preserved attributes": why 0.1).
FROZEN_SLACK = 0.1
FROZEN_READER = "logreg"  # the frozen reader fitted by the audit when no branch model is known


def frozen_kept_ok(frozen_xprime: float, frozen_x: float, min_fraction: float) -> bool:
    """The frozen reading of a preserved attribute keeps ``min_fraction - FROZEN_SLACK`` of
    the same frozen model's accuracy on the original rows."""
    return preserved_ok(frozen_xprime, frozen_x, min_fraction - FROZEN_SLACK)


REMAP = "_remap"  # judge-name suffix: the judge's predictions re-mapped on held-out rows
KEYED = "_key"  # judge-name suffix: family retrained on the release with the noise removed
CERTIFICATE = "certificate"  # judge name: the cell release's certified bound (any attacker)
COLUMN = "@"  # family@column: the family retrained on that released column alone
CURVE_FRACTIONS = (0.25, 0.5, 1.0)


def curve_climbing(curve: list[list[float]], n: int, tol: float) -> bool:
    """A learning curve is still climbing when its last step (50 % -> 100 % of the attack
    training set) gains more than ``tol`` and more than one standard error of the
    difference of two accuracies on ``n`` rows, sqrt(2 p (1 - p) / n)."""
    if len(curve) < 2 or n <= 0:
        return False
    (_, before), (_, last) = curve[-2], curve[-1]
    return last - before > max(tol, float(np.sqrt(2 * last * (1 - last) / n)))


@dataclass(frozen=True)
class AttributeReport:
    """One attribute's audit row; ``accuracies`` holds every judge's accuracy on x'.

    Judges: the frozen branch model ("frozen"), each retrained family, each of those
    re-mapped on held-out rows ("<judge>_remap", suppressed only) and, when the policy gates
    on it, each family retrained on the key-stripped release ("<family>_key").
    ``balanced``, ``ci_high`` and ``balanced_ci_high`` hold the same judges' balanced
    accuracy and 95 % upper bounds; a suppressed attribute is judged on the upper bounds.
    """

    name: str
    role: str  # "suppressed" | "preserved"
    n: int
    majority: float
    floor: float
    original: float  # best retrained attacker on the original x
    original_by_family: dict[str, float]
    frozen_x: float | None
    frozen_xprime: float | None
    attackers: dict[str, float]
    margins: dict[str, float] = field(default_factory=dict)  # suppressed: judge -> margin
    min_fraction: float | None = None  # preserved
    extra_judges: dict[str, float] = field(default_factory=dict)  # remap (and key) judges
    chance: float = 0.0  # 1/k
    balanced_floor: float = 0.0
    balanced: dict[str, float] = field(default_factory=dict)
    ci_high: dict[str, float] = field(default_factory=dict)
    balanced_ci_high: dict[str, float] = field(default_factory=dict)
    learning_curve: dict[str, list[list[float]]] = field(default_factory=dict)
    climbing: tuple[str, ...] = ()  # families whose curve is still climbing
    key_compromised: dict[str, float] | None = None  # family -> accuracy, noise removed
    confidence: float = 0.95
    # class name -> rows, for each class with fewer rows than folds (mass.metrics.strata)
    rare_classes: dict[str, int] = field(default_factory=dict)
    original_balanced: float | None = None  # best balanced accuracy on the original x
    # suppressed: the cell release's bound on any attacker (mass.metrics.certificate), judged
    # as the judge CERTIFICATE when ``margins`` holds it (audit.gate_certificate)
    certificate: Certificate | None = None
    # who the frozen judge is: "branch" (the run directory's model) or the family fitted on
    # the original rows out of fold (FROZEN_READER); "" when there is none
    frozen_by: str = ""
    # suppressed, projected to a larger release (mass.metrics.growth): the attackers' training
    # rows projected to, and judge -> how far its accuracy bound rose (in ``ci_high`` already)
    projected_rows: int | None = None
    growth: dict[str, float] = field(default_factory=dict)

    @property
    def baseline(self) -> float:
        return baseline_of(self.majority, self.floor)

    @property
    def balanced_baseline(self) -> float:
        return baseline_of(self.chance, self.balanced_floor)

    @property
    def curve_climbing(self) -> bool:
        return bool(self.climbing)

    @property
    def accuracies(self) -> dict[str, float]:
        judges = {} if self.frozen_xprime is None else {FROZEN: self.frozen_xprime}
        return {**judges, **self.attackers, **self.extra_judges}

    @property
    def worst(self) -> float:
        """Suppressed: the strongest judge on x'. Preserved: the best retrained attacker."""
        accs = self.accuracies if self.role == "suppressed" else self.attackers
        return max(accs.values()) if accs else float("nan")

    @property
    def frozen_kept(self) -> float | None:
        """The frozen judge's accuracy on x' over its accuracy on x (None: no frozen judge)."""
        if self.frozen_xprime is None or not self.frozen_x:
            return None
        return utility_retention(self.frozen_xprime, self.frozen_x)

    @property
    def retention(self) -> float | None:
        return None if self.original <= 0 else utility_retention(self.worst, self.original)

    def judge_ok(self, judge: str) -> bool:
        """Suppressed: the judge's upper bounds stay within both limits."""
        return judge_ok(self.ci_high.get(judge, self.accuracies[judge]), self.baseline,
                        self.balanced_ci_high.get(judge), self.balanced_baseline,
                        self.margins[judge])  # fmt: skip

    def certificate_ok(self) -> bool:
        """The certificate's bounds within the CERTIFICATE judge's limits (none: fails)."""
        c, margin = self.certificate, self.margins.get(CERTIFICATE)
        if margin is None:
            return True
        if c is None or c.accuracy is None or c.balanced is None:
            return False
        return judge_ok(c.accuracy, self.baseline, c.balanced, self.balanced_baseline, margin)

    @property
    def passed(self) -> bool:
        if self.role == "suppressed":
            return all(self.judge_ok(judge) for judge in self.accuracies) and (
                self.certificate_ok())  # fmt: skip
        fraction = self.min_fraction or 0.0
        frozen = self.frozen_xprime is None or frozen_kept_ok(
            self.frozen_xprime, self.frozen_x or 0.0, fraction
        )
        return preserved_ok(self.worst, self.original, fraction) and frozen


def family_of(judge: str) -> str:
    """The judge whose margin applies: ``gboost@id_remap`` -> ``gboost``."""
    return judge.removesuffix(REMAP).removesuffix(KEYED).split(COLUMN)[0]


def column_of(judge: str) -> str | None:
    """The released column a column-alone judge attacked (``gboost@id_remap`` -> ``id``)."""
    if COLUMN not in judge:
        return None
    return judge.removesuffix(REMAP).removesuffix(KEYED).split(COLUMN, 1)[1]
