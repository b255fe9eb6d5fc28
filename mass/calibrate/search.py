"""Calibration's search: the candidates of :mod:`.space` in their order
(:func:`.space.ordered`: cheapest first, the cells first under the key gate), each fitted, its
release-time noise bisected (:mod:`.noise`), judged by the gate's rule (:mod:`.judge`).
Among the candidates that pass privacy and the named preserved attributes, the one that
keeps the most utility nobody named is chosen: the smallest normalised information kept
over the watch attributes when any are given, else the label-free structure within S
(:func:`mass.metrics.unnamed.unnamed_utility`); the last resort only runs when nothing else
passed (docs/calibration.md)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mass.audit.policy import AuditPolicy
from mass.calibrate.certified import (
    GATED_SKIP,
    certificates_at_release_shape,
    gated_refusal,
    worst_bound,
)
from mass.calibrate.judge import ValidationAudit, summary
from mass.calibrate.noise import (
    NOISE_LEVELS,
    bisect_noise,
    release_of,
    released,
    with_output_noise,
)
from mass.calibrate.rank import (  # noqa: F401  (infeasible_attributes, nonlinear_leak: public)
    LINEAR_ERASER,
    infeasible_attributes,
    nonlinear_leak,
    rank_key,
    rare_class,
    rarest_note,
    rows_needed,
    watch_shortfall,
)
from mass.calibrate.report import (
    failure_message,
    frontier,
    report_head,
    verdict,
    why,
    write_report,
)
from mass.calibrate.sampling import fold_pairs
from mass.calibrate.space import (
    SEARCH_SPACE,
    Candidate,
    certified_cell_count,
    certified_min_cells,
    certified_rows_needed,
    ordered,
    params_for,
    resolved_config,
)
from mass.calibrate.validation import (
    release_shaped_folds,
    trained_validation,
    validation_plan,
)
from mass.config import CalibrationConfig
from mass.errors import CalibrationError, ConfigError, InputError
from mass.io import EmbeddingDataset
from mass.methods._common import subset
from mass.metrics.certificate import cells_of
from mass.rows import joint_codes

log = logging.getLogger(__name__)


def budget_clock(kind: str):
    """The clock ``--budget-minutes`` is read on: ``"cpu"`` is this process's CPU time (every
    thread: torch trains on two, the attackers on one), which waiting for a loaded machine
    does not eat into, so the erasers and the attackers search the same candidates whatever
    else runs (docs/calibration.md, "The policy"; the runs behind it are in
    docs/journal/calibration-runs.md). Not torch's fits: its threads spin on the CPU clock
    under contention. ``"wall"`` is elapsed time, for a hard bound on the clock."""
    return time.process_time if kind == "cpu" else time.perf_counter


MIN_EPOCHS = 5
# adaptive epoch cost per row on a busy 2-core box, until the first MaSS fit is measured
SECONDS_PER_ROW_EPOCH = 1.5e-3
# Share of the budget the last-resort candidates (``Candidate.last_resort``) keep for
# themselves while nothing has passed: the others stop where it begins. A last resort is closed
# form (seconds to fit) with a noise search of a few levels (docs/calibration.md, "Search
# order").
LAST_RESORT_SHARE = 0.2
# Under the key gate the last resort is judged without noise once, then, when it passes,
# measured whole and for what it keeps unnamed: three judgings. Once a closed-form linear
# eraser of its kind (the probe, a one-round LEACE) has been fitted and judged, its share
# shrinks to three times that measured cost when that is less (why: docs/calibration.md,
# "Search order").
LAST_RESORT_JUDGINGS = 3
LAST_RESORT_KIN = ("leace_iterated", "leace_project")


# A passing candidate ends the search early only when it also keeps at least this much of the
# utility nobody named (mass.metrics.unnamed.unnamed_utility); otherwise the search goes on
# within the budget for one that keeps more.
UNNAMED_ENOUGH = 0.9


@dataclass
class CalibrationResult:
    candidate: Candidate
    noise: float
    modifier: torch.nn.Module  # with the chosen noise
    fit: Any  # FitResult
    config: dict[str, Any]  # the resolved configuration to record (config.yaml)
    report: dict[str, Any]


@dataclass
class _Search:
    """The state of one search (what :func:`calibrate`'s steps share)."""

    train: EmbeddingDataset
    suppress: list[str]
    preserve: list[str]
    policy: AuditPolicy
    cfg: CalibrationConfig
    watch: list[str]
    now: Any  # the budget clock
    t0: float
    wall0: float
    deadline: float
    strata: np.ndarray
    folds: list[np.ndarray]
    fit_ds: EmbeddingDataset
    val_ds: EmbeddingDataset
    val_how: str
    audit: ValidationAudit
    reserve: float = 0.0  # the last resorts' budget share, kept aside while nothing passed
    room_fraction: float = 0.0
    report: dict[str, Any] = field(default_factory=dict)
    points: list[dict] = field(default_factory=list)
    chosen: tuple | None = None  # (candidate, fit, point, params, fit_on)
    stopped: str = "search space exhausted"
    measured_rates: list[float] = field(default_factory=list)  # CPU-s per row-epoch so far
    linear_only: str | None = None  # set once a linear eraser leaves S to non-linear judges
    over_budget: bool = False
    # method -> the seconds of each of its fits so far (one fold's, or a holdout's)
    fit_seconds: dict[str, list[float]] = field(default_factory=dict)
    trained_val: dict[str, Any] = field(default_factory=dict)
    judge_seconds: float = 0.0  # the slowest judging of one release so far (one noise level)
    # the slowest judging of the closed-form eraser the last resorts' share was planned on
    # (_plan_reserve): what a last resort's own fits plan its judging at
    reserve_judge: float | None = None
    # the certified partition skipped for too few audited rows: (its fewest cells, the
    # audited rows they need), for the refusal
    certified_short: tuple[int, int] | None = None
    # under the key gate: the one continuous candidate tried (the cheapest, a probe); the
    # other continuous ones are skipped (CONTINUOUS_SKIPPED)
    probe: str | None = None
    # the first candidate that passed validation but whose lookup at the release's shape did
    # not fit the budget: (its name, the CPU-s the search would have needed), for the refusal
    short_of_budget: tuple[str, float] | None = None
    # the most passes a lookup at the release's shape has fitted on its halves so far: a
    # later one shares them (mass.methods.ot_repair.reuse) and fits only its own
    shape_passes: int = 0
    # the same for the validation fits (every closed-form candidate fits the same rows)
    fit_passes: int = 0


def calibrate(
    train: EmbeddingDataset,
    *,
    suppress: list[str],
    preserve: list[str],
    policy: AuditPolicy,
    cfg: CalibrationConfig,
    val: EmbeddingDataset | None = None,
    space: tuple[Candidate, ...] = SEARCH_SPACE,
    out_dir: str | None = None,
    sample_note: dict | None = None,
    policy_source: str = "policy",
    watch: list[str] | tuple[str, ...] = (),
) -> CalibrationResult:
    """Search ``space`` (see the module docstring); write calibration.json/.png to ``out_dir``.
    ``watch``: labelled attributes neither suppressed nor preserved that rank the passing
    candidates (else the label-free structure does).

    Raises :class:`CalibrationError` (after writing the report) when nothing passes.
    """
    from mass.methods.ot_repair.reuse import shared_fits

    s = _start(train, suppress, preserve, policy, cfg, val, list(watch), space)
    s.report = report_head(s, sample_note, policy_source, NOISE_LEVELS)
    infeasible = infeasible_attributes(s.audit.base, policy)
    if infeasible:
        s.stopped = "infeasible request"
        ident = s.audit.measure(s.audit.x, full=True)
        s.points.append({"candidate": "identity", "noise": 0.0, **ident})
        return _finish(s, infeasible, out_dir)
    cells_first = bool(policy.gate_key_compromised or policy.gate_certificate)
    order = ordered(space, preserve, transductive=cfg.transductive, cells_first=cells_first)
    if policy.gate_certificate:  # cells only: the other candidates are skipped (GATED_SKIP)
        s.report["order"] = CERTIFIED_ONLY
    elif cells_first:
        s.report["order"] = CELLS_FIRST
        s.probe = next((c.name for c in order if _continuous(c)), None)
    # the cell candidates share their passes' predictor and transport (bit for bit the same
    # fits, each computed once: mass.methods.ot_repair.reuse)
    with shared_fits():
        for c in order:
            if _try(s, c):
                break
        return _finish(s, infeasible, out_dir)


# calibration.json's ``order`` under the key gate (docs/calibration.md, "Search order")
CELLS_FIRST = (
    "cells first: the policy gates the key-compromised view, so release noise does not count, "
    "and a deterministic continuous release leaked to a retrained non-linear judge on every "
    "real-data set measured; the cheapest candidate (a probe), the certified cells, the other "
    "cells, then the last resort (the other continuous candidates are not tried)"
)
# calibration.json's ``order`` under the certificate gate (.certified)
CERTIFIED_ONLY = (
    "cells only: the policy gates the certificate (audit.gate_certificate), which only a "
    "noise-free cell release has; the certified cells first, then the other cells"
)
# why the continuous candidates after the probe are skipped under the key gate
CONTINUOUS_SKIPPED = (
    "not tried under the key gate: a deterministic continuous release cannot be certified, "
    "and its leak can grow with the rows an attacker holds past what validation projects "
    '(docs/calibration.md, "Search order")'
)


def _continuous(c: Candidate) -> bool:
    """A candidate released as a continuous map of its row: neither cells, the last resort
    nor a transductive fit (whose guarantee is on exactly its rows)."""
    return not (c.cells or c.last_resort or c.transductive)


def _start(train, suppress, preserve, policy, cfg, val, watch, space) -> _Search:
    now = budget_clock(cfg.budget_clock)
    wall0, t0 = time.perf_counter(), now()
    strata = joint_codes(
        train.labels, [*suppress, *preserve]
    )  # S x R; rare ones pooled (strata.py)
    folds, fit_ds, val_ds, val_how = validation_plan(train, val, cfg, strata)
    # out of fold, privacy is attacked within each fold's release (one model each)
    audit = ValidationAudit(val_ds, suppress, preserve, policy, cfg, watch=watch, fold_rows=folds)
    # under the certificate gate no last resort is tried (continuous: .certified.GATED_SKIP)
    last_resorts = (preserve and not policy.gate_certificate
                    and any(c.last_resort for c in space))  # fmt: skip
    return _Search(
        train, list(suppress), list(preserve), policy, cfg, watch, now, t0, wall0,
        t0 + 60.0 * cfg.budget_minutes, strata, folds, fit_ds, val_ds, val_how, audit,
        reserve=LAST_RESORT_SHARE * 60.0 * cfg.budget_minutes if last_resorts else 0.0,
        room_fraction=max((policy.fraction(r) for r in preserve), default=0.0) + cfg.room,
    )  # fmt: skip


def _skipped(s: _Search, c: Candidate, entry: dict) -> bool:
    """Whether ``c`` is skipped before fitting (a reason is recorded in ``entry``)."""
    if s.policy.gate_certificate and (not c.cells or c.transductive):
        entry.update(status="skipped", reason=GATED_SKIP)
        return True
    if c.last_resort and s.chosen is not None:
        entry.update(status="skipped", reason=f"{s.chosen[0].name} passed and keeps more")
        return True
    if s.probe is not None and _continuous(c) and c.name != s.probe:
        entry.update(status="skipped", reason=CONTINUOUS_SKIPPED)
        return True
    if s.linear_only and c.method == LINEAR_ERASER and int(c.params.get("rounds", 1)) == 1:
        entry.update(status="skipped", reason=s.linear_only)
        return True
    if c.certified_rows == "validated" and (reason := _validated_count_redundant(s)):
        entry.update(status="skipped", reason=reason)
        return True
    return False


def _certifying_rows(s: _Search, c: Candidate) -> int:
    """The audited rows that set a certified candidate's cell count."""
    if c.certified_rows == "validated":
        return len(s.val_ds)
    return s.cfg.release_rows or len(s.val_ds)


def _validated_count_redundant(s: _Search) -> str | None:
    """Why the certified partition at the validated rows' count is not tried: without
    ``--release-rows`` above them it is the release-count candidate after it; None: try it."""
    rows, val = s.cfg.release_rows, len(s.val_ds)

    def count(n: int) -> int:
        return certified_cell_count(s.train.labels, s.suppress, s.policy, n)

    if not rows or count(rows) <= count(val):
        return (
            f"the rows the gate audits ({rows or val}) certify no more cells than the "
            f"{val} validated rows: ot-repair+certified|R is this candidate"
        )
    return None


def _epochs(s: _Search, c: Candidate, entry: dict, c_fit, c_folds, c_deadline):
    """(go, epochs): the epochs a trained candidate can afford before ``c_deadline`` (None for
    closed-form ones); ``go`` False records why it is skipped."""
    left = c_deadline - s.now()
    if not c.trained:
        # its fits planned on the fastest fit of its method measured so far (0 before any),
        # or the slowest when it fits a pass no earlier fit on these rows shares (_own_passes):
        # a candidate whose fits cannot end before the deadline is not started, instead of
        # overrunning the budget by a first fold (docs/calibration.md, "Search order")
        took = s.fit_seconds.get(c.method) or [0.0]
        need = (max(took) if _own_passes(c, s.fit_passes) else min(took)) * (len(c_folds) or 1)
        if left > need:
            return True, None
        s.over_budget = True
        if left > 0:
            reason = (f"budget: {left:.0f}s left, its {len(c_folds) or 1} fits would take "
                      f"~{need:.0f}s (the fastest {c.method} fit so far)")  # fmt: skip
        elif c_deadline == s.deadline:
            reason = "budget exhausted"
        else:
            reason = "budget exhausted (the last resorts' share is kept aside)"
        entry.update(status="skipped", reason=reason)
        return False, None
    # cost ~ rows * (G epochs + branch pretraining, ~half an epoch per branch epoch); planned
    # on the slowest measured rate, not the last: on a loaded box torch's threads spin on
    # the CPU clock and the rates of one search's fits differ several-fold, so planning on
    # the fastest one overruns the budget (docs/journal/calibration-runs.md)
    branch_units = (
        0.5 * int(c.params.get("branch_epochs", 30)) * (len(s.suppress) + len(s.preserve))
    )
    per_epoch = (max(s.measured_rates, default=SECONDS_PER_ROW_EPOCH) * len(c_fit)
                 * (len(c_folds) or 1))  # fmt: skip
    epochs = int(min(int(c.params.get("epochs", 30)),
                     (0.5 * left) // max(per_epoch, 1e-9) - branch_units))  # fmt: skip
    if epochs >= MIN_EPOCHS:
        return True, epochs
    s.over_budget = True
    entry.update(status="skipped", reason=(
        f"budget: {left:.0f}s left, a fit of {MIN_EPOCHS} epochs would take "
        f"~{per_epoch * (MIN_EPOCHS + branch_units):.0f}s"))  # fmt: skip
    return False, None


def _fit_parts(s: _Search, fit_on, c_fit, c_audit, c_folds, c_deadline: float, method: str,
               judge: float | None = None, check=None):  # fmt: skip
    """(the fit, or None when cross-fitted; (modifier, validation rows) pairs). Out of fold,
    a candidate whose fits so far show that the other folds and its judging would run past
    ``c_deadline`` stops there (:class:`_OverBudget` naming the cost), so one fit, not four,
    is what a budget overruns by; one whose first fold ``check(modifier, rows)`` names a leak
    for stops there too (:class:`_ClearlyFails`)."""
    took = s.fit_seconds.setdefault(method, [])
    judge = s.judge_seconds if judge is None else judge
    if not c_folds:
        t = s.now()
        fit = fit_on(c_fit)
        took.append(s.now() - t)
        return fit, [(fit.modifier, np.arange(len(c_audit.x)))]
    parts, slowest = [], 0.0
    for k, (others, rows) in enumerate(fold_pairs(c_folds)):
        t = s.now()
        parts.append((fit_on(subset(s.train, others)).modifier, rows))
        end = s.now()
        took.append(end - t)
        slowest, todo = max(slowest, end - t), len(c_folds) - 1 - k
        if check is not None and k == 0 and todo:
            leak = check(parts[0][0], rows)
            if leak:
                raise _ClearlyFails(leak)
            end = s.now()
        # after every fold, not the first only: on a loaded box later folds run slower (the
        # text set's k-means cells ate the last resorts' share); the judging that follows the
        # fits is planned on the slowest judging so far
        rest, left = slowest * todo + judge, c_deadline - end
        if todo and rest > left:
            raise _OverBudget(
                f"budget: {k + 1} of {len(c_folds)} folds' fits took {sum(took[-k - 1 :]):.0f}s, "
                f"the other {todo} and the judging would take ~{rest:.0f}s, {left:.0f}s left"
            )
    return None, parts


class _OverBudget(Exception):
    """A candidate's fits would run past its deadline (the message says by how much)."""


class _ClearlyFails(Exception):
    """A candidate's first fold already fails validation (the message names the leak)."""


def _try(s: _Search, c: Candidate) -> bool:
    """Fit ``c``, search its noise, judge it; True when the search should stop."""
    from mass.methods import get_method

    entry: dict[str, Any] = {"name": c.name, "method": c.method, "params": c.params}
    s.report["candidates"].append(entry)
    if c.last_resort:
        entry["last_resort"] = True
    if _skipped(s, c, entry):
        return False
    # the last resorts' share is kept aside while nothing has passed
    c_deadline = s.deadline if c.last_resort or s.chosen is not None else s.deadline - s.reserve
    c_fit, c_audit, c_folds = s.fit_ds, s.audit, s.folds
    if c.trained and s.folds and c_deadline > s.now():
        (c_fit, c_audit), c_folds = trained_validation(s), []
    go, epochs = _epochs(s, c, entry, c_fit, c_folds, c_deadline)
    if not go:
        return False
    params = params_for(c, s.cfg.seed, epochs)
    if c.certified_cells:  # as many cells as the rows the gate audits can certify
        rows = _certifying_rows(s, c)
        params["cell_count"] = certified_cell_count(s.train.labels, s.suppress, s.policy, rows)
        if params["cell_count"] < 2:
            entry.update(status="skipped", reason=f"{rows} audited rows certify no two cells")
            return False
        least = certified_min_cells(s.train.labels, s.preserve, params)
        if params["cell_count"] < least:  # its cells would be more than the rows certify
            need = certified_rows_needed(s.train.labels, s.suppress, s.policy, least)
            s.certified_short = (least, need)
            entry.update(status="skipped", reason=(
                f"{rows} audited rows certify about {params['cell_count']} cells; this "
                f"partition has at least {least} (2 levels per axis in each class of R), "
                f"which need about {need:,} audited rows"))  # fmt: skip
            return False
    entry["params"] = params
    method = get_method(c.method)

    def fit_on(ds, method=method, params=params):
        return method.fit(ds, suppress=list(s.suppress), preserve=list(s.preserve),
                          params=params, seed=s.cfg.seed, progress=False)  # fmt: skip

    tf = s.now()
    try:
        # a last resort's judging is planned as its share was: at its kin's measured judging
        judge = s.reserve_judge if c.last_resort else None
        fit, parts = _fit_parts(s, fit_on, c_fit, c_audit, c_folds, c_deadline, c.method, judge,
                                check=_first_fold_check(s, c, c_audit))  # fmt: skip
    except _OverBudget as e:
        s.over_budget = True
        entry.update(status="skipped", reason=str(e), fit_seconds=s.now() - tf)
        return False
    except _ClearlyFails as e:
        entry.update(status="failed", reason=str(e), fit_seconds=s.now() - tf, folds_fitted=1)
        return False
    except (ConfigError, InputError, ValueError, RuntimeError) as e:
        entry.update(status="error", reason=str(e))
        log.info("calibration: %s failed to fit: %s", c.name, e)
        return False
    entry["fit_seconds"] = s.now() - tf
    if not c.trained:  # its passes are kept for the candidates after it (_own_passes)
        s.fit_passes = max(s.fit_passes, _shareable_passes(c))
    if c.trained:
        units = (int(params.get("epochs", 30)) + 0.5 * int(params.get("branch_epochs", 30))
                 * (len(s.suppress) + len(s.preserve)))  # fmt: skip
        s.measured_rates.append(entry["fit_seconds"] / (len(c_fit) * units * (len(c_folds) or 1)))
    entry["validated_on"] = "holdout" if c_audit is not s.audit else "main"
    found = bisect_noise(parts, c_audit, c_deadline, comfortable=min(0.99, s.room_fraction),
                         now=s.now, key_gate=s.policy.gate_key_compromised,
                         certificate_gate=s.policy.gate_certificate)  # fmt: skip
    entry["points"] = [{k: v for k, v in p.items() if k != "reports"} for p in found["points"]]
    s.judge_seconds = max(
        [s.judge_seconds, *(float(p.get("seconds", 0.0)) for p in found["points"])]
    )
    s.points += [{"candidate": c.name, **p} for p in found["points"]]
    _plan_reserve(s, c, entry, found["points"])
    entry["status"] = "passed" if found["chosen"] is not None else "failed"
    entry["reason"] = found["reason"]
    if found["chosen"] is None:
        # at the highest noise, or at none when the key view is gated (no noise can help)
        if c.method == LINEAR_ERASER and (found.get("max_noise_failed")
                                          or found.get("key_view_failed")):  # fmt: skip
            s.linear_only = s.linear_only or nonlinear_leak(found["points"], c.name)
        s.over_budget = s.over_budget or s.now() > c_deadline
        return False
    if c.cells and not c.trained and (not s.cfg.transductive or s.policy.gate_certificate) and (
            not _shape_affordable(s, c, entry, len(c_fit), c_folds, c_deadline)
            or not _lookups_at_release_shape(s, c, entry, fit_on, found["chosen"], c_audit,
                                             len(s.train) if c_folds else len(c_fit))):  # fmt: skip
        return False
    return _rank(s, c, entry, found["chosen"], (fit, params, fit_on, parts, c_audit))


def _first_fold_check(s: _Search, c: Candidate, audit):
    """A cell candidate's first-fold verdict (:meth:`ValidationAudit.clearly_fails`), where
    its release without noise decides (the key or the certificate gated: no noise level can
    rescue a fail); None elsewhere."""
    if not (c.cells and not c.trained
            and (s.policy.gate_key_compromised or s.policy.gate_certificate)):  # fmt: skip
        return None
    return audit.clearly_fails


def _shareable_passes(c: Candidate) -> int:
    """The ``ot_repair`` passes a fit of ``c`` leaves for later fits on the same rows (the
    shared fits, :mod:`mass.methods.ot_repair.reuse`): none with a held-out share
    (``cell_balance`` fits its passes on other rows) or for another method."""
    if c.method != "ot_repair" or c.params.get("cell_balance"):
        return 0
    return max(int(c.params.get("passes", 1)), 1)


def _own_passes(c: Candidate, shared: int) -> int:
    """The passes a fit of ``c`` fits itself when earlier fits on its rows fitted ``shared``
    (0 for another method, whose fits share nothing and are planned as before)."""
    if c.method != "ot_repair":
        return 0
    passes = max(int(c.params.get("passes", 1)), 1)
    return passes - (0 if c.params.get("cell_balance") else min(passes, shared))


def _shape_affordable(s: _Search, c: Candidate, entry: dict, n_fit: int, c_folds,
                      c_deadline: float) -> bool:  # fmt: skip
    """Whether the lookup at the release's shape (two fits, each on half the training rows)
    can end before ``c_deadline``: each pass an earlier such check has not fitted on the same
    halves planned at the slowest fit of the candidate's method so far, per fitted row and
    pass, and the rest (its cells, on shared passes) at the fastest. A held-out share
    (``cell_balance``) fits its passes on other rows: none shared. False records the
    candidate as skipped for the budget, and what it passed (``s.short_of_budget``)."""
    took = s.fit_seconds.get(c.method) or [0.0]
    rows = len(s.train) - len(s.train) // len(c_folds) if c_folds else n_fit
    passes = max(int(c.params.get("passes", 1)), 1)
    own = _own_passes(c, s.shape_passes)
    need = 2 * (own * max(took) + (min(took) if own < passes else 0.0)) * (
        len(s.train) / 2) / max(rows, 1)  # fmt: skip
    left = c_deadline - s.now()
    if need <= left:
        return True
    s.over_budget = True
    spent = s.now() - s.t0
    s.short_of_budget = s.short_of_budget or (c.name, spent + need + s.reserve)
    entry.update(status="skipped", reason=(
        f"budget: passed validation, but its lookup at the release's shape (2 fits of "
        f"{passes} pass(es), {own} not shared, each on half the {len(s.train)} training rows) would take "
        f"~{need:.0f}s, {max(left, 0.0):.0f}s left"))  # fmt: skip
    return False


def _plan_reserve(s: _Search, c: Candidate, entry: dict, points: list[dict]) -> None:
    """Under the key gate, shrink the last resorts' share to :data:`LAST_RESORT_JUDGINGS` times
    the measured cost (its fits and its slowest judging) of a one-round closed-form eraser of
    their kind, when that is less than the share."""
    if not (s.reserve and s.policy.gate_key_compromised and c.method in LAST_RESORT_KIN
            and int(c.params.get("rounds", 1)) == 1 and points):  # fmt: skip
        return
    judge = max(float(p.get("seconds", 0.0)) for p in points)
    cost = float(entry.get("fit_seconds", 0.0)) + judge
    if LAST_RESORT_JUDGINGS * cost < s.reserve:
        s.reserve, s.reserve_judge = LAST_RESORT_JUDGINGS * cost, judge
        s.report["last_resort_reserve"] = {"seconds": round(s.reserve, 1), "planned_on": c.name}


def _lookups_at_release_shape(s: _Search, c: Candidate, entry: dict, fit_on, pt: dict, audit,
                              n_fit: int) -> bool:  # fmt: skip
    """A cell candidate that passed validation, judged once more by the lookups on released
    values alone, on releases of the training rows with at least as many rows per cell as
    the release model (fitted on ``n_fit`` rows) gives the gate: two models, each fitted on
    one half and releasing the other (:func:`.validation.release_shaped_folds`); validation's
    own releases hold fewer rows per cell, and their lookups under-read the gate's
    (docs/calibration.md, "The lookup at the release's shape"). ``audit`` supplies the
    bounds and margins. False (the entry failed) when a lookup's bound is over its limit."""
    from mass.noise import row_seeds
    from mass.rows import normalize_rows

    pairs, how, project = release_shaped_folds(s, n_fit)
    t = s.now()
    x, seeds = normalize_rows(s.train.x), row_seeds(s.train.ids)
    groups = np.full(len(x), -1, dtype=np.int64)
    for k, (_, rows) in enumerate(pairs):
        groups[rows] = k
    # under the key gate the gate also looks up the release with its noise removed
    level = 0.0 if s.policy.gate_key_compromised else float(pt["noise"])
    try:
        parts = [(fit_on(subset(s.train, fit_rows)).modifier, rows) for fit_rows, rows in pairs]
        s.shape_passes = max(s.shape_passes, _shareable_passes(c))  # kept for the next
        plain = released(parts, x, seeds, 0.0)
        xp = plain if level == 0.0 else released(parts, x, seeds, level)
    except (ConfigError, InputError, ValueError, RuntimeError) as e:  # fail closed
        entry.update(status="failed", release_shape={"how": how, "passed": False},
                     reason=f"the lookup at the release's shape ({how}) could not be "
                            f"judged: its fit failed: {e}")  # fmt: skip
        return False
    reports = audit.lookups(x, xp, s.train.labels, groups, project)
    over = [f"{a}: {j} bound {r.ci_high[j]:.3f} (balanced {r.balanced_ci_high[j]:.3f}), limits "
            f"{r.baseline + r.margins[j]:.3f} ({r.balanced_baseline + r.margins[j]:.3f})"
            for a, r in reports.items() for j in r.ci_high if not r.judge_ok(j)]  # fmt: skip
    # the certificate on the same releases, at the gate's rows per cell (.certified)
    certs, uncertified = certificates_at_release_shape(
        plain, pairs, s.train.labels, s.suppress, reports, confidence=s.policy.confidence,
        margins={a: min(s.policy.margins(a).values()) for a in s.suppress},
        release_rows=s.cfg.release_rows or len(s.val_ds), n_fit=n_fit,
        counted="cell_count" in entry.get("params", {}), seed=s.cfg.seed + 2)  # fmt: skip
    gated = uncertified if s.policy.gate_certificate else []
    cells = int(cells_of(plain[pairs[0][1]]).max()) + 1  # distinct vectors of one release
    entry["release_shape"] = {
        "how": how, "noise": level, "seconds": s.now() - t,
        "rows_per_cell": round(len(pairs[0][1]) / max(cells, 1), 2),
        "lookups": {a: summary(r) for a, r in reports.items()}, "certificate": certs,
        "passed": not (over or gated)}  # fmt: skip
    if s.policy.gate_certificate:  # ranked on it too (mass.calibrate.rank.rank_key)
        pt["certificate"] = worst_bound(certs)
    if over or gated:
        entry.update(status="failed", reason="; ".join(
            ([f"the lookup on released values fails on releases shaped like the release's "
              f"({how}): " + "; ".join(over)] if over else [])
            + (["its certificate on those releases fails audit.gate_certificate: "
                + "; ".join(gated)] if gated else [])))  # fmt: skip
    return not (over or gated)


def _rank(s: _Search, c: Candidate, entry: dict, pt: dict, made) -> bool:
    """Measure what a passing candidate keeps beyond R, keep it if it ranks first (or fail it
    under ``audit.watch_min_kept``); True when the search should stop."""
    fit, params, fit_on, parts, c_audit = made
    pt["unnamed"] = c_audit.unnamed(release_of(parts, c_audit, float(pt["noise"])))
    entry.update(noise=pt["noise"], unnamed=pt["unnamed"])
    low = watch_shortfall(s.policy, pt["unnamed"])
    if low:
        entry.update(status="failed", reason=low)
        return False
    if s.chosen is None or rank_key(pt) > rank_key(s.chosen[2]):
        s.chosen = (c, fit, pt, params, fit_on)
    kept = pt["unnamed"]["utility"]
    if ((not s.preserve or pt["fraction"] >= min(0.99, s.room_fraction))
            and kept is not None and kept >= UNNAMED_ENOUGH):  # fmt: skip
        s.stopped = f"early: {c.name} passed with room"
        return True
    if s.now() > s.deadline:
        s.stopped = "budget"
        return True
    return False


def _finish(s: _Search, infeasible: list[str], out_dir) -> CalibrationResult:
    """Record the search; raise CalibrationError when nothing passed, else refit if needed."""
    report, policy, base, now = s.report, s.policy, s.audit.base, s.now
    if s.chosen is None and s.stopped == "search space exhausted" and (
            s.over_budget or now() > s.deadline):  # fmt: skip
        s.stopped = "budget"
    report.update(seconds=now() - s.t0, wall_seconds=time.perf_counter() - s.wall0,
                  stopped=s.stopped, frontier=frontier(s.points),
                  feasible=None if not infeasible else False, infeasible=infeasible)  # fmt: skip
    if s.chosen is None:
        report["chosen"] = None
        lead = ("no configuration met the policy on validation" if not s.short_of_budget else
                f"no configuration was judged whole within the budget ({s.short_of_budget[0]} "
                "passed validation only)")  # fmt: skip
        report["verdict"] = verdict(infeasible, s.points, policy, base, lead)
        need = rows_needed(base, policy, s.audit.confidence, s.audit.labels)
        if need and not infeasible:
            report["verdict"] += (
                f"; {base.n_eval} validation rows are too few for the policy's margin: a "
                f"release at chance keeps its validation upper bound 2 standard errors under "
                f"the limit only from {max(need.values()):,} rows on ("
                + ", ".join(f"{a}: {n:,}{rarest_note(s.audit.labels.get(a))}"
                            for a, n in need.items())
                + "): more rows (or --val)"
                + (", above all of the rarest class, or that class merged into another"
                   if any(rare_class(s.audit.labels.get(a)) for a in need) else ""))  # fmt: skip
        if not infeasible:  # what a certified cell release of this size could be
            rows = s.cfg.release_rows or len(s.val_ds)
            cells = certified_cell_count(s.train.labels, s.suppress, policy, rows)
            report["verdict"] += (
                f"; a cell release of {rows} audited rows certifies within the margin with "
                f"about {cells} cells at most (cells independent of S; docs/audit.md, "
                "\"Certificate\")" if cells >= 2 else
                f"; {rows} audited rows certify no cell release within the margin")  # fmt: skip
            if s.short_of_budget:  # what a larger budget would have judged
                name, need = s.short_of_budget
                report["verdict"] += (f"; {name} passed validation but its lookup at the "
                                      f"release's shape did not fit the budget: about "
                                      f"--budget-minutes {math.ceil(need / 60)} would judge it")  # fmt: skip
            if policy.gate_certificate:  # what the certificate gate left and what it read
                report["verdict"] += gated_refusal(report["candidates"])
            if s.certified_short:  # what would let the certified partition be tried
                least, need = s.certified_short
                report["verdict"] += (f"; the certified partition within R has at least "
                                      f"{least} cells, which need about {need:,} audited rows "
                                      "(--release-rows)")  # fmt: skip
        write_report(out_dir, report, s.points, None, policy)
        raise CalibrationError(failure_message(report, base))
    c, fit, pt, params, fit_on = s.chosen
    if fit is None:  # cross-fitted: the release model is fitted on every training row
        tf = now()
        fit = fit_on(s.train)
        report.update(refit_seconds=now() - tf, seconds=now() - s.t0,
                      wall_seconds=time.perf_counter() - s.wall0)  # fmt: skip
    noise = float(pt["noise"])
    report["chosen"] = {"candidate": c.name, "method": c.method, "noise": noise,
                        "validated_on": ("holdout: the validated fit is released"
                                         if c.trained and s.folds else
                                         "out of fold: refitted on every training row"
                                         if s.folds else s.val_how),
                        "excess": pt["excess"], "fraction": pt["fraction"],
                        "privacy": pt["privacy"], "utility": pt["utility"],
                        "unnamed": pt.get("unnamed"), "why": why(pt, policy)}  # fmt: skip
    if pt.get("certificate") is not None:  # under audit.gate_certificate (.certified)
        report["chosen"]["certificate"] = pt["certificate"]
    report["verdict"] = "passed on validation"
    if c.last_resort:
        report["chosen"]["last_resort"] = (
            f"nothing that keeps more passed: the release keeps only the preserved attributes' "
            f"discriminant directions ({fit.extra.get('kept_dims')} of {s.train.x.shape[1]}); "
            "this is data minimisation: whatever else the data was useful for is not in it")  # fmt: skip
    config = resolved_config(c, params, noise, s.suppress, s.preserve)
    report["config"] = config
    write_report(out_dir, report, s.points, (c.name, noise), policy)
    return CalibrationResult(c, noise, with_output_noise(fit.modifier, noise), fit, config, report)
