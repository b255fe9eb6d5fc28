"""Calibration: `mass train` without an explicit config searches for one that meets the policy.

The search (docs/calibration.md) holds out a validation split (or uses ``--val``; small data
is validated out of fold), then tries a small fixed space, cheapest first (under the key gate
the cell releases first): LEACE and its variants (:mod:`mass.methods.leace_iterated`), the
quadratic eraser, OT repair and its cells, MaSS adaptive after each eraser or none, and a
utility-leaning MaSS. For every fitted candidate the release-time noise
level is bisected on the already trained modifier (:mod:`.noise`). Each release is judged by
the publication gate's own rule (:mod:`.judge`: :func:`mass.metrics.attribute_report`, 95 %
upper bounds on accuracy and balanced accuracy, per-family margins, the leakage floor). The
configuration with the best utility among those that pass is chosen (:mod:`.search`); when
none passes, :class:`~mass.errors.CalibrationError` carries the measured frontier and the
floor (:mod:`.report`). Above ``--max-rows`` training uses a streamed stratified sample
(:mod:`.sampling`, whose :func:`~.sampling.sample_table` any bounded-memory reader can use).

Modules: ``sampling`` (strata, splits, folds, streamed sample), ``noise`` (release noise and
its bisection), ``judge`` (the validation audit), ``validation`` (the rows each candidate is fitted and
judged on), ``search`` (space and search), ``report``
(frontier, verdict, calibration.json/.png), ``flow`` (the `mass train` side).
"""

from mass.calibrate.judge import Baselines, ValidationAudit, judge
from mass.calibrate.noise import NOISE_LEVELS, apply, bisect_noise, with_output_noise
from mass.calibrate.report import frontier, plot_frontier
from mass.calibrate.sampling import (
    fold_indices,
    load_training,
    sample_table,
    stratified_split,
    stream_sample,
    total_rows,
)
from mass.calibrate.search import (
    CalibrationResult,
    budget_clock,
    calibrate,
    infeasible_attributes,
)
from mass.calibrate.space import (
    ADAPTIVE_BASE,
    SEARCH_SPACE,
    Candidate,
    adaptive_params,
    resolved_config,
)

__all__ = [
    "ADAPTIVE_BASE",
    "NOISE_LEVELS",
    "SEARCH_SPACE",
    "Baselines",
    "CalibrationResult",
    "Candidate",
    "ValidationAudit",
    "adaptive_params",
    "apply",
    "bisect_noise",
    "budget_clock",
    "calibrate",
    "fold_indices",
    "frontier",
    "infeasible_attributes",
    "judge",
    "load_training",
    "plot_frontier",
    "resolved_config",
    "sample_table",
    "stratified_split",
    "stream_sample",
    "total_rows",
    "with_output_noise",
]
