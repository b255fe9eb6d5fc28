"""How calibration validates a candidate: which rows it is fitted on and which release of
which rows its attackers judge (out of fold for small data, a stratified holdout for larger
data or for a trained candidate, ``--val``, or the release rows themselves with
``--transductive``; docs/calibration.md)."""

from __future__ import annotations

import numpy as np

from mass.calibrate.judge import ValidationAudit
from mass.calibrate.report import baseline_report
from mass.calibrate.sampling import fold_indices, fold_pairs, holdout_codes, stratified_split
from mass.config import CalibrationConfig
from mass.errors import ConfigError
from mass.methods._common import subset
from mass.metrics.strata import stratification_codes

# Up to this many training rows (no --val), every training row is validated out of fold, so
# the validation attackers train on min(rows, cfg.attacker_rows) * 4/5 rows: at least as many
# as the gate's (9/10 of the release) for a release of up to ~that size: attackers trained on
# fewer rows than the gate's under-read it, a pass on validation and a failure at the gate
# (docs/journal/calibration-runs.md).
CROSSFIT_MAX_ROWS = 16000
CROSSFIT_FOLDS = 4
# ... but a trained (MaSS) candidate is validated on ONE fit: this share of the training rows
# held out (stratified), judged with the gate's own CV folds (attackers train on 9/10 of the
# held rows, as the gate's on a release) and the same bounds (the gate's z + SAFETY_SE, see
# mass.calibrate.judge); the validated fit is the
# release model (no refit): out of fold it would cost 4 fits, more than a 5-10 minute budget
# on 2 cores holds from a few thousand rows on (docs/journal/calibration-runs.md).
TRAINED_HOLDOUT = 0.3


def validation_plan(train, val, cfg: CalibrationConfig, strata):
    """(folds, rows fitted on, rows validated on, how): small data out of fold (each fold's
    rows released by a candidate fitted on the other folds, so attackers train on as many
    rows as a release audit's would; the chosen one is then refitted on all rows), larger
    data on a stratified holdout, or ``--val``; transductive (``--transductive``): fitted on
    the release rows and judged on their release, which is what the gate audits."""
    if cfg.transductive:
        return [], train, train, (f"the release rows themselves ({len(train)}, --transductive: "
                                  "each candidate fitted on them and judged on their release)")  # fmt: skip
    if val is None and len(train) <= CROSSFIT_MAX_ROWS:
        if len(train) < 40:
            raise ConfigError(f"{train.source}: {len(train)} rows are too few to calibrate on; "
                              "pass more rows or an explicit --config")  # fmt: skip
        folds = fold_indices(stratification_codes(strata, CROSSFIT_FOLDS), CROSSFIT_FOLDS,
                             cfg.seed)  # fmt: skip
        return folds, train, train, (f"out-of-fold releases of all {len(train)} training rows "
                                     f"({CROSSFIT_FOLDS} folds, stratified, seed {cfg.seed})")  # fmt: skip
    if val is None:
        rest, held = stratified_split(holdout_codes(strata, cfg.val_fraction), cfg.val_fraction,
                                      cfg.seed)  # fmt: skip
        return [], subset(train, rest), subset(train, held), (
            f"{cfg.val_fraction:.0%} of the training rows held out, stratified, "
            f"seed {cfg.seed}")  # fmt: skip
    return [], train, val, f"--val ({val.source})"


def trained_validation(s):
    """(rows to fit on, validation audit) of the trained candidates under out-of-fold
    validation: one stratified holdout judged with the gate's folds (module constants);
    ``s`` is the search state (:class:`mass.calibrate.search._Search`), which keeps them."""
    if not s.trained_val:
        rest, held = stratified_split(holdout_codes(s.strata, TRAINED_HOLDOUT),
                                      TRAINED_HOLDOUT, s.cfg.seed)  # fmt: skip
        ha = ValidationAudit(subset(s.train, held), s.suppress, s.preserve, s.policy, s.cfg,
                             folds=s.policy.folds, watch=s.watch)  # fmt: skip
        s.trained_val.update(fit_ds=subset(s.train, rest), audit=ha)
        s.report["validation"]["trained"] = {
            "how": f"{TRAINED_HOLDOUT:.0%} of the training rows held out, stratified, seed "
                   f"{s.cfg.seed}; one fit on the rest, which is the release model",
            "rows": len(held), "train_rows": len(rest), "attacker_rows": ha.base.n_eval,
            "attacker_train_rows": ha.base.n_eval * (ha.folds - 1) // ha.folds,
            "folds": ha.folds, "baselines": baseline_report(ha.base, s.policy)}  # fmt: skip
    return s.trained_val["fit_ds"], s.trained_val["audit"]


def release_shaped_folds(s, n_fit: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], str, float]:
    """(fit rows, released rows) pairs of the training rows whose releases hold at least as
    many rows per cell as the release will, how, and the training rows to project the
    lookups' bounds to.

    A cell release's lookup (a table from released vector to S) reads more the more rows
    each cell holds. The release model is fitted on ``n_fit`` rows (every training row out of
    fold, the rest of a holdout) and releases m (``--release-rows``, else every training
    row): m/n_fit released rows per fitted row of a cell. Two halves of the n training rows,
    each model fitted on one and releasing the other, give one released row per fitted row:
    as many as the release when m = n_fit, more when the release is smaller (the check then
    over-reads it, on the safe side; more folds, k with 1/(k-1) = m/n_fit, under-read
    twoyear's cells against the gate). A release larger than that cannot be shaped from the
    training rows: its lookups' bounds are projected along their learning curves
    (:mod:`mass.metrics.growth`) to the training rows that hold as many rows per cell as the
    gate's attackers of the release ((1 - 1/folds) m rows, cells of an n_fit-row fit):
    (1 - 1/folds) m n / (2 n_fit), no projection when that is fewer than the halves' own
    (docs/calibration.md, "The lookup at the release's shape")."""
    n = len(s.train)
    m = int(s.cfg.release_rows or n)
    folds = 2
    pairs = fold_pairs(fold_indices(stratification_codes(s.strata, folds), folds, s.cfg.seed + 1))
    how = (f"{folds} models, each fitted on one half of the {n} training rows (stratified) "
           f"and releasing the other")  # fmt: skip
    share = 1.0 - 1.0 / s.policy.folds
    return pairs, how, share * m * (folds - 1) * n / (folds * n_fit)
