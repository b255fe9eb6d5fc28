"""The vacuity check counts an attribute the original embeddings predict on EITHER scale
(mass.audit.vacuity.vacuous, issue 37): a skewed attribute whose accuracy sits at its majority
but whose balanced accuracy the original reads is informative, so a balanced limit above what
the original itself reaches is refused as vacuous, not run silently."""

from __future__ import annotations

from mass.audit.vacuity import vacuous
from mass.metrics.rules import AttributeReport


def _skewed(original: float, original_balanced: float) -> AttributeReport:
    # 96 % majority, 20,000 audited rows: accuracy limit 1.01, balanced limit 0.55
    return AttributeReport(name="rare", role="suppressed", n=20_000, majority=0.96, floor=0.96,
                           original=original, original_by_family={"logreg": original},
                           frozen_x=None, frozen_xprime=None, attackers={"logreg": 0.96},
                           margins={"logreg": 0.05}, chance=0.5, balanced_floor=0.5,
                           original_balanced=original_balanced)  # fmt: skip


def test_an_attribute_informative_on_the_balanced_scale_alone_is_checked():
    # accuracy 0.961: within 2 standard errors of the majority (not informative by accuracy);
    # balanced 0.53 > 0.5 + 2 se (informative), yet under the balanced limit 0.55: vacuous
    why = vacuous([_skewed(0.961, 0.53)])
    assert len(why) == 1 and "at or above the original embeddings' own best attacker" in why[0]


def test_an_attribute_informative_on_neither_scale_is_left_to_the_judges():
    assert vacuous([_skewed(0.961, 0.502)]) == []


def test_a_balanced_limit_below_the_originals_reading_is_not_vacuous():
    assert vacuous([_skewed(0.961, 0.80)]) == []
