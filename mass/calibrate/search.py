"""Calibration's search: a small fixed space of candidates, cheapest first, each fitted, its
release-time noise bisected (:mod:`.noise`), judged by the gate's rule (:mod:`.judge`); the
best utility among those that pass is kept (docs/calibration.md)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mass.audit.policy import AuditPolicy
from mass.calibrate.judge import Baselines, ValidationAudit
from mass.calibrate.noise import NOISE_LEVELS, bisect_noise, with_output_noise
from mass.calibrate.report import (
    baseline_report,
    failure_message,
    frontier,
    verdict,
    why,
    write_report,
)
from mass.calibrate.sampling import fold_indices, joint_codes, stratified_split, subset
from mass.config import CalibrationConfig, MassConfig
from mass.errors import CalibrationError, ConfigError, InputError
from mass.io import EmbeddingDataset

log = logging.getLogger(__name__)


def budget_clock(kind: str):
    """The clock ``--budget-minutes`` is read on: ``"cpu"`` is this process's CPU time (every
    thread: torch trains on two, the attackers on one), which waiting for a loaded machine
    does not eat into, so the erasers and the attackers search the same candidates whatever
    else runs (measured: run 4 vs run 5 of docs/calibration.md, same wall budget, 4-5x the
    load, labsup passed then was refused). Not torch's fits: its threads spin on the CPU
    clock under contention (the demo's 30-epoch MaSS fits: 47-65 CPU-s at load ~2, 264-310 at
    load 3-5). ``"wall"`` is elapsed time, for a hard bound on the clock."""
    return time.process_time if kind == "cpu" else time.perf_counter

# MaSS adaptive base of every mass candidate: attribute-specific (the agnostic NT-Xent term
# keeps s, docs/bench_quality.md), large batches, and a little training-time output noise so
# G does not rely on exact values; the release level is then bisected.
ADAPTIVE_BASE: dict[str, Any] = {
    "mode": "adaptive",
    "epochs": 30,
    "batch_size": 256,
    "lr": 0.005,
    "w_rstar": 0,
    "branch_epochs": 10,  # G's frozen S/R judges; 10 epochs fit them on calibration-sized data
    "adaptive": {"output_noise": 0.05},
}
MIN_EPOCHS = 5
# Up to this many training rows (no --val), every training row is validated out of fold, so
# the validation attackers train on min(rows, cfg.attacker_rows) * 4/5 rows: at least as many
# as the gate's (9/10 of the release) for a release of up to ~that size. Measured
# (docs/calibration.md): with a 25 % holdout instead, gradient boosting trained on 947
# validation rows read 'female' at 0.525 where the gate's, trained on 1,826 release rows, read
# 0.558 - a pass on validation, a failure at the gate.
CROSSFIT_MAX_ROWS = 16000
CROSSFIT_FOLDS = 4
# ... but a trained (MaSS) candidate is validated on ONE fit: this share of the training rows
# held out (stratified), judged with the gate's own CV folds (attackers train on 9/10 of the
# held rows, as the gate's on a release) and the same bounds (the gate's z + SAFETY_SE, see
# mass.calibrate.judge); the validated fit is the
# release model (no refit). Out of fold it cost 4 fits, which put every MaSS candidate out of
# a 5-10 minute budget on 2 cores from a few thousand rows on (docs/calibration.md, run 4).
TRAINED_HOLDOUT = 0.3
# adaptive epoch cost per row on a busy 2-core box, until the first MaSS fit is measured
SECONDS_PER_ROW_EPOCH = 1.5e-3
# Share of the budget the last-resort candidates (``Candidate.last_resort``) keep for
# themselves while nothing has passed: the others stop where it begins. A last resort is closed
# form (seconds to fit) and its noise search measured 1-3 levels on names (13-27 s each on
# 2,100 rows, docs/calibration.md); a fifth of a 5-minute budget is 60 CPU-s.
LAST_RESORT_SHARE = 0.2


@dataclass(frozen=True)
class Candidate:
    """One point of the search space: a method and its parameters (noise comes later)."""

    name: str
    method: str  # registered method name
    params: dict[str, Any] = field(default_factory=dict)
    # tried only when nothing else passed (its budget share kept aside until then): it keeps
    # the preserved attributes and drops what else the data was useful for
    last_resort: bool = False

    @property
    def trained(self) -> bool:
        return self.method == "mass"


def _adaptive(pre_erase: str, **extra: Any) -> dict[str, Any]:
    ad = {**ADAPTIVE_BASE["adaptive"], "pre_erase": pre_erase, **extra.pop("adaptive", {})}
    return {**ADAPTIVE_BASE, **extra, "adaptive": ad}


SEARCH_SPACE: tuple[Candidate, ...] = (
    Candidate("leace", "leace_iterated", {"given_preserved": False, "rounds": 1}),
    Candidate("leace|R", "leace_iterated", {"given_preserved": True, "rounds": 1}),
    Candidate("leace x3", "leace_iterated", {"given_preserved": False, "rounds": 3}),
    Candidate("leace|R x3", "leace_iterated", {"given_preserved": True, "rounds": 3}),
    Candidate("quadratic", "leace_quadratic"),
    Candidate("ot-repair", "ot_repair"),
    Candidate("mass+quadratic", "mass", _adaptive("quadratic")),
    Candidate("mass+leace", "mass", _adaptive("leace")),
    Candidate("mass", "mass", _adaptive("none")),
    Candidate(
        "mass+quadratic/utility",
        "mass",
        _adaptive("quadratic", w_r=5.0, adaptive={"adv_weight": 10.0}),
    ),
    Candidate("leace|R+R-span", "leace_project", last_resort=True),
)


@dataclass
class CalibrationResult:
    candidate: Candidate
    noise: float
    modifier: torch.nn.Module  # with the chosen noise
    fit: Any  # FitResult
    config: dict[str, Any]  # the resolved configuration to record (config.yaml)
    report: dict[str, Any]


def _params_for(c: Candidate, seed: int, epochs: int | None) -> dict[str, Any]:
    params = json.loads(json.dumps(c.params))
    if c.trained:
        params["seed"] = seed
        if epochs is not None:
            params["epochs"] = epochs
    return params


def resolved_config(c: Candidate, params: dict, noise: float, suppress, preserve) -> dict:
    """The chosen configuration as `mass train --config` would take it (train: section)."""
    if c.method == "mass":
        p = json.loads(json.dumps(params))
        p.setdefault("adaptive", {})["output_noise"] = float(noise)
        cfg = MassConfig.from_dict({**p, "method": "mass"}, suppress=suppress, preserve=preserve)
        return cfg.to_dict()
    return {"method": c.method, "suppress": list(suppress), "preserve": list(preserve),
            **params, "output_noise": float(noise)}  # fmt: skip


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
) -> CalibrationResult:
    """Search ``space`` (see the module docstring); write calibration.json/.png to ``out_dir``.

    Raises :class:`CalibrationError` (after writing the report) when nothing passes.
    """
    from mass.methods import get_method

    now = budget_clock(cfg.budget_clock)
    wall0 = time.perf_counter()
    t0 = now()
    deadline = t0 + 60.0 * cfg.budget_minutes
    attrs = [*suppress, *preserve]
    strata = joint_codes(train.labels, attrs)
    folds: list[np.ndarray] = []
    if val is None and len(train) <= CROSSFIT_MAX_ROWS:
        # small data: every training row is validated out of fold (each fold's rows released
        # by a candidate fitted on the other folds), so attackers train on as many rows as a
        # release audit's would; the chosen configuration is then refitted on all rows
        if len(train) < 40:
            raise ConfigError(f"{train.source}: {len(train)} rows are too few to calibrate on; "
                              "pass more rows or an explicit --config")  # fmt: skip
        folds = fold_indices(strata, CROSSFIT_FOLDS, cfg.seed)
        fit_ds, val_ds = train, train
        val_how = (f"out-of-fold releases of all {len(train)} training rows "
                   f"({CROSSFIT_FOLDS} folds, stratified, seed {cfg.seed})")  # fmt: skip
    elif val is None:
        rest, held = stratified_split(strata, cfg.val_fraction, cfg.seed)
        fit_ds, val_ds = subset(train, rest), subset(train, held)
        val_how = (f"{cfg.val_fraction:.0%} of the training rows held out, stratified, "
                   f"seed {cfg.seed}")  # fmt: skip
    else:
        fit_ds, val_ds, val_how = train, val, f"--val ({val.source})"
    audit = ValidationAudit(val_ds, suppress, preserve, policy, cfg)
    trained_val: dict[str, Any] = {}  # out of fold only: the trained candidates' holdout

    def trained_validation():
        if not trained_val:
            rest, held = stratified_split(strata, TRAINED_HOLDOUT, cfg.seed)
            ha = ValidationAudit(subset(train, held), suppress, preserve, policy, cfg,
                                 folds=policy.folds)  # fmt: skip
            trained_val.update(fit_ds=subset(train, rest), audit=ha)
            report["validation"]["trained"] = {
                "how": f"{TRAINED_HOLDOUT:.0%} of the training rows held out, stratified, seed "
                       f"{cfg.seed}; one fit on the rest, which is the release model",
                "rows": len(held), "train_rows": len(rest), "attacker_rows": ha.base.n_eval,
                "attacker_train_rows": ha.base.n_eval * (ha.folds - 1) // ha.folds,
                "folds": ha.folds, "baselines": baseline_report(ha.base, policy)}  # fmt: skip
        return trained_val["fit_ds"], trained_val["audit"]
    base = audit.base
    report: dict[str, Any] = {
        "policy": policy.to_dict(),
        "policy_source": policy_source,
        "budget_minutes": cfg.budget_minutes,
        "budget_clock": cfg.budget_clock,
        "validation": {"how": val_how, "rows": len(val_ds), "train_rows": len(fit_ds),
                       "attacker_rows": base.n_eval,
                       "attacker_train_rows": base.n_eval * (audit.folds - 1) // audit.folds,
                       "note": "the gate's attackers train on 9/10 of the release (10 folds): "
                               "a release of more than "
                               f"{base.n_eval * (audit.folds - 1) // audit.folds * 10 // 9} "
                               "rows faces attackers trained on more rows than validated",
                       "judge": f"the audit's rule (mass.metrics.attribute_report), "
                                f"{audit.folds}-fold CV, upper bounds at {audit.confidence:.4f} "
                                f"(the gate's {policy.confidence} widened for the release "
                                f"size: mass.calibrate.judge.validation_z)",
                       "release_rows": cfg.release_rows,
                       "families": list(audit.families)},
        "sample": sample_note,
        "noise_levels": list(NOISE_LEVELS),
        "baselines": baseline_report(base, policy),
        "candidates": [],
    }  # fmt: skip
    infeasible = infeasible_attributes(base, policy)
    room_fraction = max((policy.fraction(r) for r in preserve), default=0.0) + cfg.room
    points: list[dict] = []
    chosen = None
    stopped = "search space exhausted"
    measured_rates: list[float] = []  # per-row-epoch CPU-s of each trained fit so far
    linear_only = None  # set once a linear eraser leaves S to non-linear judges only
    over_budget = False
    last_resorts = preserve and any(c.last_resort for c in space)
    reserve = LAST_RESORT_SHARE * 60.0 * cfg.budget_minutes if last_resorts else 0.0
    if infeasible:
        stopped = "infeasible request"
        ident = audit.measure(audit.x, full=True)
        points.append({"candidate": "identity", "noise": 0.0, **ident})
    ordered = [c for c in space if not c.last_resort] + [c for c in space if c.last_resort]
    for c in [] if infeasible else ordered:
        if (c.params.get("given_preserved") or c.last_resort) and not preserve:
            continue  # the same eraser as plain leace / nothing to keep
        entry: dict[str, Any] = {"name": c.name, "method": c.method, "params": c.params}
        report["candidates"].append(entry)
        if c.last_resort:
            entry["last_resort"] = True
            if chosen is not None:
                entry.update(status="skipped", reason=f"{chosen[0].name} passed and keeps more")
                continue
        if linear_only and c.method == LINEAR_ERASER and int(c.params.get("rounds", 1)) == 1:
            entry.update(status="skipped", reason=linear_only)
            continue
        # the last resorts' share is kept aside while nothing has passed
        c_deadline = deadline if c.last_resort or chosen is not None else deadline - reserve
        c_fit, c_audit, c_folds = fit_ds, audit, folds
        if c.trained and folds and c_deadline > now():
            c_fit, c_audit = trained_validation()
            c_folds = []
        left = c_deadline - now()
        epochs = None
        if c.trained:
            # cost ~ rows * (G epochs + branch pretraining, ~half an epoch per branch epoch)
            branch_units = 0.5 * int(c.params.get("branch_epochs", 30)) * len(attrs)
            # planned on the slowest measured rate, not the last: on a loaded box torch's
            # threads spin on the CPU clock, and the rates of one search's fits differed 3-4x
            # (the demo, session 6: 2.2 to 8.2 CPU-s per epoch unit; planning the last fit on
            # the fastest rate put the search 147 s past a 600 s budget)
            per_row_epoch = max(measured_rates, default=SECONDS_PER_ROW_EPOCH)
            per_epoch = per_row_epoch * len(c_fit) * (len(c_folds) or 1)
            epochs = int(min(int(c.params.get("epochs", 30)),
                             (0.5 * left) // max(per_epoch, 1e-9) - branch_units))  # fmt: skip
            if epochs < MIN_EPOCHS:
                over_budget = True
                entry.update(status="skipped", reason=(
                    f"budget: {left:.0f}s left, a fit of {MIN_EPOCHS} epochs would take "
                    f"~{per_epoch * (MIN_EPOCHS + branch_units):.0f}s"))  # fmt: skip
                continue
        elif left <= 0:
            over_budget = True
            entry.update(status="skipped", reason="budget exhausted" if c_deadline == deadline
                         else "budget exhausted (the last resorts' share is kept aside)")
            continue
        params = _params_for(c, cfg.seed, epochs)
        entry["params"] = params
        tf = now()
        method = get_method(c.method)

        def fit_on(ds, c=c, method=method, params=params):
            return method.fit(ds, suppress=list(suppress), preserve=list(preserve),
                              params=params, seed=cfg.seed, progress=False)  # fmt: skip

        try:
            if c_folds:
                parts = []
                for k, rows in enumerate(c_folds):
                    others = np.sort(np.concatenate([f for j, f in enumerate(c_folds) if j != k]))
                    parts.append((fit_on(subset(train, others)).modifier, rows))
                fit = None
            else:
                fit = fit_on(c_fit)
                parts = [(fit.modifier, np.arange(len(c_audit.x)))]
        except (ConfigError, InputError, ValueError, RuntimeError) as e:
            entry.update(status="error", reason=str(e))
            log.info("calibration: %s failed to fit: %s", c.name, e)
            continue
        entry["fit_seconds"] = now() - tf
        if c.trained:
            units = (int(params.get("epochs", 30))
                     + 0.5 * int(params.get("branch_epochs", 30)) * len(attrs))  # fmt: skip
            measured_rates.append(entry["fit_seconds"]
                                  / (len(c_fit) * units * (len(c_folds) or 1)))  # fmt: skip
        entry["validated_on"] = "holdout" if c_audit is not audit else "main"
        found = bisect_noise(parts, c_audit, c_deadline, comfortable=min(0.99, room_fraction),
                             now=now)
        entry["points"] = [{k: v for k, v in p.items() if k != "reports"} for p in found["points"]]
        for p in found["points"]:
            points.append({"candidate": c.name, **p})
        entry["status"] = "passed" if found["chosen"] is not None else "failed"
        entry["reason"] = found["reason"]
        if found["chosen"] is None:
            if c.method == LINEAR_ERASER and found.get("max_noise_failed"):
                linear_only = linear_only or nonlinear_leak(found["points"], c.name)
            over_budget = over_budget or now() > c_deadline
            continue
        pt = found["chosen"]
        entry["noise"] = pt["noise"]
        score = _score(pt)
        if chosen is None or score > _score(chosen[2]):
            chosen = (c, fit, pt, params, fit_on)
        if not preserve or pt["fraction"] >= min(0.99, room_fraction):
            stopped = f"early: {c.name} passed with room"
            break
        if now() > deadline:
            stopped = "budget"
            break
    if chosen is None and stopped == "search space exhausted" and (over_budget
                                                                   or now() > deadline):
        stopped = "budget"
    report["seconds"] = now() - t0  # on the budget clock
    report["wall_seconds"] = time.perf_counter() - wall0
    report["stopped"] = stopped
    report["frontier"] = frontier(points)
    report["feasible"] = None if not infeasible else False
    report["infeasible"] = infeasible
    if chosen is None:
        report["chosen"] = None
        report["verdict"] = verdict(infeasible, points, policy, base)
        need = rows_needed(base, policy, audit.confidence)
        if need and not infeasible:
            report["verdict"] += (
                f"; {base.n_eval} validation rows are too few for the policy's margin: a "
                f"release at chance keeps its validation upper bound 2 standard errors under "
                f"the limit "
                f"only from {max(need.values())} rows on ({need}): more rows (or --val)")
        write_report(out_dir, report, points, None, policy)
        raise CalibrationError(failure_message(report, base))
    c, fit, pt, params, fit_on = chosen
    if fit is None:  # cross-fitted: the release model is fitted on every training row
        tf = now()
        fit = fit_on(train)
        report["refit_seconds"] = now() - tf
        report["seconds"] = now() - t0
        report["wall_seconds"] = time.perf_counter() - wall0
    noise = float(pt["noise"])
    report["chosen"] = {"candidate": c.name, "method": c.method, "noise": noise,
                        "validated_on": ("holdout: the validated fit is released"
                                         if c.trained and folds else
                                         "out of fold: refitted on every training row"
                                         if folds else val_how),
                        "excess": pt["excess"], "fraction": pt["fraction"],
                        "privacy": pt["privacy"], "utility": pt["utility"],
                        "why": why(pt, policy)}  # fmt: skip
    report["verdict"] = "passed on validation"
    if c.last_resort:
        report["chosen"]["last_resort"] = (
            f"nothing that keeps more passed: the release keeps only the preserved attributes' "
            f"discriminant directions ({fit.extra.get('kept_dims')} of {train.x.shape[1]}); "
            "whatever else the data was useful for is not in it")  # fmt: skip
    config = resolved_config(c, params, noise, suppress, preserve)
    report["config"] = config
    write_report(out_dir, report, points, (c.name, noise), policy)
    return CalibrationResult(c, noise, with_output_noise(fit.modifier, noise), fit, config, report)




LINEAR_ERASER = "leace_iterated"


def nonlinear_leak(points: list[dict], name: str) -> str | None:
    """Why the remaining one-round linear erasers are skipped, or None: at the highest noise
    measured the linear judges (logistic regression, re-mapped or not) pass and only
    non-linear ones read S. A one-round LEACE removes linear information of S only (``|R``
    less of it), so it cannot remove what is left. The iterated variants (``rounds`` > 1) are
    still tried: they refit on the renormalised output, where renormalisation has written S
    back non-linearly (k401 passed with ``leace|R x3`` in runs 4-5 of docs/calibration.md and
    was refused in run 7, where this skip also took the iterated variants away); then the
    quadratic eraser and the trained candidates."""
    if not points:
        return None
    top = max(points, key=lambda p: p["noise"])
    judges = [(j, v["ok"]) for s in top.get("privacy", {}).values() for j, v in s.items()]
    linear = [ok for j, ok in judges if j.startswith("logreg")]
    failing = sorted({j for j, ok in judges if not ok})
    if not linear or not all(linear) or not failing:
        return None
    return (f"{name} at noise {top['noise']}: the linear judges pass, {failing} still read "
            "the suppressed attribute; a linear eraser cannot remove non-linear information")


def _score(pt: dict) -> tuple:
    return (round(pt["fraction"], 6), round(pt["fidelity"], 6), -pt["noise"])


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


def rows_needed(base: Baselines, policy: AuditPolicy, confidence: float) -> dict[str, int]:
    """Suppressed attributes whose validation rows are too few for the policy's margin at the
    validation ``confidence`` (the audit's own warning, mass.audit.runner.min_rows):
    attribute -> rows needed."""
    from mass.audit.runner import min_rows

    need = {s: min_rows(base.baseline(s), min(policy.margins(s).values()), confidence)
            for s in base.suppress}  # fmt: skip
    return {s: n for s, n in need.items() if base.n_eval < n}
