"""Privacy/utility metrics of the audit (docs/contracts.md, 'Audit library signatures').

Privacy is judged by attackers: the frozen branch models trained on the original data and
scikit-learn classifiers *retrained* on the modified data (the adaptive attacker the paper's
threat model allows). An attacker cannot do better than chance on a perfectly suppressed
attribute, but "chance" is not the majority rate when a preserved attribute correlates with
it: :func:`leakage_floor` is the accuracy reachable from the preserved labels alone, which
any modifier that keeps those labels must leak.

Package layout: :mod:`.scores` (rates, bounds, floors), :mod:`.attackers` (retrained and
frozen attackers), :mod:`.rules` (the suppress/preserve rules and the per-attribute report),
:mod:`.judges` (:func:`attribute_report`: every judge of one attribute, run).
The names below are the package's public interface.
"""

from mass.metrics.attackers import (  # noqa: F401
    attack_predictions,
    frozen_accuracy,
    frozen_predict,
    retrained_attackers,
)
from mass.metrics.judges import attribute_report  # noqa: F401
from mass.metrics.rules import (  # noqa: F401
    COLUMN,
    CURVE_FRACTIONS,
    KEYED,
    REMAP,
    AttributeReport,
    aum,
    column_of,
    curve_climbing,
    family_of,
    judge_limit,
    judge_ok,
    preserved_ok,
    suppressed_ok,
    utility_retention,
)
from mass.metrics.scores import (  # noqa: F401
    ATTACKER_FAMILIES,
    FROZEN,
    Score,
    balanced_accuracy,
    balanced_upper,
    chance_level,
    leakage_floor,
    majority_rate,
    remap_predictions,
    score,
    wilson_upper,
    z_value,
)
