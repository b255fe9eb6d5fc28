"""Calibration: `mass train` without an explicit config searches for one that meets the policy.

The search (docs/calibration.md) holds out a validation split (or uses ``--val``), then tries a
small fixed space, cheapest first:

1. ``leace`` - linear concept erasure (closed form, seconds); ``leace|R``, which erases only
   the part of S that the preserved attributes do not explain; each also refitted 3 times
   through the output's renormalisation (``x3``; all mass.methods.leace_iterated);
2. ``quadratic`` - LEACE's quadratic variant (class-conditional means and covariances);
3. ``mass+quadratic``, ``mass+leace``, ``mass`` - MaSS adaptive trained after that eraser (or
   none), attribute-specific (w_r* = 0);
4. ``mass+quadratic/utility`` - the same with the preserve weight raised (w_r = 5) and a lighter
   adversary (adv_weight = 10), for requests where the first ones pass privacy but lose utility.

For every fitted candidate the release-time noise level (norm of seeded Gaussian noise added to
the unit output) is found by bisection over :data:`NOISE_LEVELS` on the already trained
modifier - noise needs no retraining: a MaSS modifier's ``spec.output_noise`` is swapped, an
eraser gets a ``gaussian_noise`` modifier chained after it. The smallest level whose release
passes the privacy half of the policy is kept, and the candidate is then judged whole.

The judge (:func:`judge`, the one place the rule lives) retrains attackers (logreg, kNN,
gradient boosting, MLP from :mod:`mass.metrics`) on the validation release: a suppressed
attribute passes when every family stays within ``max(majority, floor) + margin - safety``, a
preserved one when the best family keeps ``min_utility_fraction + safety`` of its accuracy on
the original validation rows. ``safety`` is one standard error of an accuracy measured on the
validation rows (at least 0.01), so a pass on validation is not a coin flip on the test set.

The configuration with the best utility among those that pass is chosen; the search stops early
once one passes with ``room`` to spare, and never runs past ``budget_minutes``. When nothing
passes, :class:`~mass.errors.CalibrationError` carries the measured frontier and the floor.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mass.config import AuditPolicy, CalibrationConfig, MassConfig
from mass.errors import CalibrationError, ConfigError, InputError
from mass.io import EmbeddingDataset
from mass.rows import joint_codes

log = logging.getLogger(__name__)

# Norm of the release-time noise on the unit output (0 = none). Bisection runs over indices.
NOISE_LEVELS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5, 0.8, 1.2)

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
CROSSFIT_MAX_ROWS = 4000  # up to this many training rows (no --val): out-of-fold validation
CROSSFIT_FOLDS = 4
HOLDOUT_MIN_ROWS = 4000  # validation rows from which attackers fit on one half, score the other
# Safety margin on validation, in standard errors of an accuracy measured on the validation rows
# (at least 0.01): the release is audited on other rows, with noise of its own (fail closed).
SAFETY_SE = 1.0
# adaptive epoch cost per row on a busy 2-core box, until the first MaSS fit is measured
SECONDS_PER_ROW_EPOCH = 1.5e-3


@dataclass(frozen=True)
class Candidate:
    """One point of the search space: a method and its parameters (noise comes later)."""

    name: str
    method: str  # registered method name
    params: dict[str, Any] = field(default_factory=dict)

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
    Candidate("mass+quadratic", "mass", _adaptive("quadratic")),
    Candidate("mass+leace", "mass", _adaptive("leace")),
    Candidate("mass", "mass", _adaptive("none")),
    Candidate(
        "mass+quadratic/utility",
        "mass",
        _adaptive("quadratic", w_r=5.0, adaptive={"adv_weight": 10.0}),
    ),
)


# ----------------------------------------------------------------------------- data


def stratified_split(
    strata: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(rest, held) row indices: ``fraction`` of every stratum held out (>= 1 row of a stratum
    with >= 2 rows, none of a singleton), seeded."""
    rng = np.random.default_rng(seed)
    held = []
    for c in np.unique(strata):
        rows = np.flatnonzero(strata == c)
        if len(rows) < 2:
            continue
        k = min(len(rows) - 1, max(1, int(round(fraction * len(rows)))))
        held.append(rng.permutation(rows)[:k])
    held_idx = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
    mask = np.ones(len(strata), dtype=bool)
    mask[held_idx] = False
    return np.flatnonzero(mask), held_idx


def fold_indices(strata: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    """``k`` disjoint row sets covering every row, each stratum dealt round-robin (seeded)."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(strata), dtype=np.int64)
    offset = 0
    for c in np.unique(strata):
        rows = rng.permutation(np.flatnonzero(strata == c))
        fold[rows] = (np.arange(len(rows)) + offset) % k
        offset += len(rows)
    return [np.flatnonzero(fold == j) for j in range(k)]


def total_rows(spec: str) -> int:
    """Rows of a Parquet file/dir/glob from the footers (nothing else is read)."""
    import pyarrow.parquet as pq

    from mass.io import expand_paths

    n = 0
    for path in expand_paths(spec):
        try:
            n += pq.ParquetFile(path).metadata.num_rows
        except Exception:  # unreadable: load_embeddings names the file and the problem
            return -1
    return n


def stream_sample(
    spec: str,
    *,
    id_col: str,
    emb_col: str,
    label_cols: list[str],
    max_rows: int,
    seed: int,
    batch_rows: int = 65536,
) -> tuple[EmbeddingDataset, dict[str, Any]]:
    """A seeded stratified sample of about ``max_rows`` rows, read in streaming passes.

    The label columns are read batch by batch (once for the classes, once for the counts of
    every stratum, i.e. combination of labels); then the rows are read once and a row of
    stratum k is kept with probability quota_k / count_k (quota proportional, at least 2 rows
    per stratum where it has them), the uniforms drawn from one seeded generator in file order.
    Memory is the sample plus one batch, whatever the input; no per-row Python objects.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mass.io import LabelEncoding, check_ids, embedding_matrix, expand_paths

    paths = expand_paths(spec)

    def batches(columns):
        for path in paths:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=columns):
                yield path, batch

    classes: dict[str, set] = {c: set() for c in label_cols}
    for path, batch in batches(label_cols):
        for c in label_cols:
            col = batch.column(c)
            if col.null_count:
                raise InputError(f"{path}: label column '{c}' has a null value; fill or drop it")
            classes[c].update(pc.unique(col).to_pylist())
    encs = {c: LabelEncoding(c, tuple(sorted(classes[c]))) for c in label_cols}
    sizes = [len(encs[c].classes) for c in label_cols]

    def codes(path, batch) -> np.ndarray:
        code = np.zeros(batch.num_rows, dtype=np.int64)
        for c, k in zip(label_cols, sizes, strict=True):
            code = code * k + encs[c].encode(batch.column(c), source=path)
        return code

    counts: dict[int, int] = {}
    n = 0
    for path, batch in batches(label_cols):
        u, cnt = np.unique(codes(path, batch), return_counts=True)
        for k, v in zip(u.tolist(), cnt.tolist(), strict=True):  # one entry per stratum
            counts[k] = counts.get(k, 0) + v
        n += batch.num_rows
    known = np.array(sorted(counts), dtype=np.int64)
    cnt = np.array([counts[k] for k in known.tolist()], dtype=np.float64)
    rates = np.minimum(1.0, np.maximum(np.minimum(cnt, 2), cnt * max_rows / max(n, 1)) / cnt)
    rng = np.random.default_rng(seed)
    kept = []
    for path, batch in batches([id_col, emb_col, *label_cols]):
        r = rates[np.searchsorted(known, codes(path, batch))]
        keep = rng.random(batch.num_rows) < r
        if keep.any():
            kept.append(pa.Table.from_batches([batch]).filter(pa.array(keep)))
    table = pa.concat_tables(kept)
    ids = check_ids(table, id_col, source=spec)
    x = embedding_matrix(table, emb_col, source=spec)
    labels = {c: encs[c].encode(table.column(c).combine_chunks(), source=spec) for c in label_cols}
    ds = EmbeddingDataset(ids=ids, x=x, labels=labels, encodings=encs, source=spec)
    note = {
        "input_rows": n,
        "sampled_rows": len(ds),
        "max_rows": max_rows,
        "seed": seed,
        "how": "seeded stratified sample over the label combinations, streaming passes "
        "(pyarrow iter_batches); ids checked for duplicates within the sample only",
    }
    return ds, note


def load_training(
    spec: str, *, id_col: str, emb_col: str, label_cols: list[str], max_rows: int, seed: int
) -> tuple[EmbeddingDataset, dict[str, Any] | None]:
    """The training rows: all of them, or above ``max_rows`` a streamed stratified sample."""
    from mass.io import load_embeddings

    n = total_rows(spec)
    if n > max_rows:
        log.info("%s: %d rows > --max-rows %d: training on a stratified sample", spec, n, max_rows)
        return stream_sample(spec, id_col=id_col, emb_col=emb_col, label_cols=label_cols,
                             max_rows=max_rows, seed=seed)  # fmt: skip
    ds = load_embeddings(spec, id_col=id_col, emb_col=emb_col, label_cols=label_cols)
    return ds, None


def subset(ds: EmbeddingDataset, rows: np.ndarray) -> EmbeddingDataset:
    import pyarrow as pa

    return dataclasses.replace(
        ds, ids=ds.ids.take(pa.array(rows)), x=ds.x[rows],
        labels={a: y[rows] for a, y in ds.labels.items()},
    )  # fmt: skip


# ----------------------------------------------------------------------------- noise


def with_output_noise(model: torch.nn.Module, level: float) -> torch.nn.Module:
    """The same fitted modifier with release-time noise of norm ``level`` (no retraining).

    A MaSS G (alone or last in a chain) gets its ``spec.output_noise`` replaced; any other
    modifier gets a ``gaussian_noise`` modifier with sigma = level / sqrt(d) chained after it.
    """
    from mass.modifiers import ChainModifier, DataModifier, GaussianNoiseModifier, NoiseSpec

    if isinstance(model, DataModifier):
        out = DataModifier(dataclasses.replace(model.spec, output_noise=float(level)))
        out.load_state_dict(model.state_dict())
        return out.eval()
    if isinstance(model, ChainModifier) and isinstance(model.parts[-1], DataModifier):
        return ChainModifier.of(*model.parts[:-1], with_output_noise(model.parts[-1], level))
    if level <= 0:
        return model
    dim = int(model.spec.dim)
    noise = GaussianNoiseModifier(NoiseSpec(dim, level / math.sqrt(dim)))
    parts = list(model.parts) if isinstance(model, ChainModifier) else [model]
    return ChainModifier.of(*parts, noise)  # flat: a chain's spec.dim reads its first part


def apply(model: torch.nn.Module, x: np.ndarray, seeds: np.ndarray, batch: int = 8192):
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(
                model(torch.from_numpy(x[i : i + batch]), torch.from_numpy(seeds[i : i + batch]))
                .numpy()
            )
    return np.concatenate(out) if out else x.copy()


# ----------------------------------------------------------------------------- the judge


@dataclass
class Baselines:
    """What the validation audit compares against, measured once on the original rows."""

    suppress: list[str]
    preserve: list[str]
    majority: dict[str, float]
    floor: dict[str, float]
    original: dict[str, dict[str, float]]  # attribute -> family -> accuracy on x
    n_eval: int
    safety: dict[str, float]  # suppressed: accuracy units; preserved: fraction units

    def best_original(self, a: str) -> float:
        return max(self.original[a].values())

    def baseline(self, s: str) -> float:
        return max(self.majority[s], self.floor[s])


def judge(
    privacy: dict[str, dict[str, float]],
    utility: dict[str, dict[str, float]],
    base: Baselines,
    policy: AuditPolicy,
) -> dict[str, Any]:
    """The policy on one validation release; the only place the pass rule lives.

    ``privacy``: suppressed attribute -> family -> accuracy of the attacker retrained on the
    release; ``utility``: preserved attribute -> family -> accuracy (families may be partial:
    the search stops measuring an attribute once its verdict is known). Returns ``privacy_ok``,
    ``utility_ok`` (None when an attribute was not measured), ``passed``, ``excess`` (worst
    accuracy above max(majority, floor), the privacy axis) and ``fraction`` (smallest preserved
    fraction of the original accuracy, the utility axis; 1.0 with nothing preserved).
    """
    privacy_ok, excess = True, -1.0
    for s in base.suppress:
        for fam, acc in privacy.get(s, {}).items():
            excess = max(excess, acc - base.baseline(s))
            if acc > base.baseline(s) + policy.margin(fam) - base.safety[s] + 1e-12:
                privacy_ok = False
        if not privacy.get(s):
            privacy_ok = False
    fraction, utility_ok = 1.0, True
    for r in base.preserve:
        accs = utility.get(r)
        if not accs:
            utility_ok, fraction = None, float("nan")
            break
        frac = max(accs.values()) / max(base.best_original(r), 1e-12)
        fraction = min(fraction, frac)
        if frac < policy.min_utility_fraction + base.safety[r] - 1e-12:
            utility_ok = False
    return {
        "privacy_ok": privacy_ok,
        "utility_ok": utility_ok,
        "passed": bool(privacy_ok and utility_ok),
        "excess": excess,
        "fraction": fraction,
    }


class ValidationAudit:
    """Retrained attackers on a validation release: holdout (fit half, score half) when it
    has >= HOLDOUT_MIN_ROWS rows, else 5-fold cross-validation (as the release audit);
    each fit capped at ``cfg.attacker_rows`` rows."""

    def __init__(self, val: EmbeddingDataset, suppress, preserve, policy, cfg: CalibrationConfig):
        from mass import metrics as M
        from mass.modifiers import normalize_rows
        from mass.noise import row_seeds

        self.suppress, self.preserve, self.policy, self.cfg = suppress, preserve, policy, cfg
        self.x = normalize_rows(val.x)
        # public seeds: calibration only needs noise of the right distribution; the release
        # draws its noise from the owner's keyed seeds
        self.seeds = row_seeds(val.ids)
        self.labels = {a: val.labels[a] for a in [*suppress, *preserve]}
        n = len(val)
        self.holdout = n >= HOLDOUT_MIN_ROWS
        if self.holdout:
            self.fit_idx, self.eval_idx = stratified_split(
                joint_codes(self.labels, [*suppress, *preserve]), 0.5, cfg.seed + 1
            )
        n_eval = len(self.eval_idx) if self.holdout else n
        original = {a: {f: self.attack(self.x, a, f) for f in cfg.families} for a in self.labels}
        majority, floor, safety = {}, {}, {}
        pres = {r: self.labels[r] for r in preserve}
        for s in suppress:
            majority[s] = M.majority_rate(self.labels[s])
            floor[s] = M.leakage_floor(self.labels[s], pres, seed=cfg.seed)
            p = min(0.99, max(majority[s], floor[s]) + policy.margin("logreg"))
            safety[s] = max(0.01, SAFETY_SE * math.sqrt(p * (1 - p) / max(n_eval, 1)))
        for r in preserve:
            q = min(0.99, max(original[r].values()) * policy.min_utility_fraction)
            safety[r] = max(0.01, SAFETY_SE * math.sqrt(q * (1 - q) / max(n_eval, 1))
                            / max(max(original[r].values()), 1e-6))  # fmt: skip
        self.base = Baselines(list(suppress), list(preserve), majority, floor, original,
                              n_eval, safety)  # fmt: skip

    def attack(self, xp: np.ndarray, attr: str, family: str) -> float:
        from mass import metrics as M

        y = self.labels[attr]
        kw = dict(families=(family,), seed=self.cfg.seed, max_rows=self.cfg.attacker_rows)
        if self.holdout:
            f, e = self.fit_idx, self.eval_idx
            return M.retrained_attackers(xp[f], y[f], xp[e], y[e], **kw)[family]
        return M.retrained_attackers(xp, y, folds=5, **kw)[family]

    def measure(
        self, xp: np.ndarray, *, full: bool = False, known: dict | None = None
    ) -> dict[str, Any]:
        """Privacy (every family, so the frontier's privacy axis is exact) and utility (stops
        once a family keeps the required fraction unless ``full``: then a lower bound);
        accuracies in ``known`` (an earlier measurement of the same release) are reused."""
        base, pol = self.base, self.policy
        known = known or {}

        def acc(kind: str, a: str, fam: str) -> float:
            prior = known.get(kind, {}).get(a, {})
            return prior[fam] if fam in prior else self.attack(xp, a, fam)

        privacy = {s: {f: acc("privacy", s, f) for f in self.cfg.families} for s in self.suppress}
        utility: dict[str, dict[str, float]] = {}
        for r in self.preserve:
            utility[r] = {}
            need = (pol.min_utility_fraction + base.safety[r]) * base.best_original(r)
            for fam in self.cfg.families:
                utility[r][fam] = acc("utility", r, fam)
                if utility[r][fam] >= need and not full:
                    break
        fidelity = float(np.mean(np.sum(self.x * xp, axis=1)))
        verdict = judge(privacy, utility, base, pol)
        return {**verdict, "privacy": privacy, "utility": utility, "fidelity": fidelity,
                "complete": bool(full)}  # fmt: skip


# ----------------------------------------------------------------------------- the search


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
) -> CalibrationResult:
    """Search ``space`` (see the module docstring); write calibration.json/.png to ``out_dir``.

    Raises :class:`CalibrationError` (after writing the report) when nothing passes.
    """
    from mass.methods import get_method

    t0 = time.perf_counter()
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
    fits_per_candidate = len(folds) or 1
    audit = ValidationAudit(val_ds, suppress, preserve, policy, cfg)
    base = audit.base
    report: dict[str, Any] = {
        "policy": policy.to_dict(),
        "budget_minutes": cfg.budget_minutes,
        "validation": {"how": val_how, "rows": len(val_ds), "train_rows": len(fit_ds),
                       "judge": "holdout half/half" if audit.holdout else "5-fold CV",
                       "families": list(cfg.families)},
        "sample": sample_note,
        "noise_levels": list(NOISE_LEVELS),
        "baselines": _baseline_report(base, policy),
        "candidates": [],
    }  # fmt: skip
    infeasible = _infeasible(base, policy)
    points: list[dict] = []
    chosen = None
    stopped = "search space exhausted"
    per_row_epoch = SECONDS_PER_ROW_EPOCH
    if infeasible:
        stopped = "infeasible request"
        ident = audit.measure(audit.x, full=True)
        points.append({"candidate": "identity", "noise": 0.0, **ident})
    for c in [] if infeasible else space:
        if c.params.get("given_preserved") and not preserve:
            continue  # the same eraser as plain leace
        entry: dict[str, Any] = {"name": c.name, "method": c.method, "params": c.params}
        report["candidates"].append(entry)
        left = deadline - time.perf_counter()
        epochs = None
        if c.trained:
            # cost ~ rows * (G epochs + branch pretraining, ~half an epoch per branch epoch)
            branch_units = 0.5 * int(c.params.get("branch_epochs", 30)) * len(attrs)
            per_epoch = per_row_epoch * len(fit_ds) * fits_per_candidate
            epochs = int(min(int(c.params.get("epochs", 30)),
                             (0.5 * left) // max(per_epoch, 1e-9) - branch_units))  # fmt: skip
            if epochs < MIN_EPOCHS:
                entry.update(status="skipped", reason=(
                    f"budget: {left:.0f}s left, a fit of {MIN_EPOCHS} epochs would take "
                    f"~{per_epoch * (MIN_EPOCHS + branch_units):.0f}s"))  # fmt: skip
                continue
        elif left <= 0:
            entry.update(status="skipped", reason="budget exhausted")
            continue
        params = _params_for(c, cfg.seed, epochs)
        entry["params"] = params
        tf = time.perf_counter()
        method = get_method(c.method)

        def fit_on(ds, c=c, method=method, params=params):
            return method.fit(ds, suppress=list(suppress), preserve=list(preserve),
                              params=params, seed=cfg.seed, progress=False)  # fmt: skip

        try:
            if folds:
                parts = []
                for k, rows in enumerate(folds):
                    others = np.sort(np.concatenate([f for j, f in enumerate(folds) if j != k]))
                    parts.append((fit_on(subset(train, others)).modifier, rows))
                fit = None
            else:
                fit = fit_on(fit_ds)
                parts = [(fit.modifier, np.arange(len(val_ds)))]
        except (ConfigError, InputError, ValueError, RuntimeError) as e:
            entry.update(status="error", reason=str(e))
            log.info("calibration: %s failed to fit: %s", c.name, e)
            continue
        entry["fit_seconds"] = time.perf_counter() - tf
        if c.trained:
            units = (int(params.get("epochs", 30))
                     + 0.5 * int(params.get("branch_epochs", 30)) * len(attrs))  # fmt: skip
            per_row_epoch = entry["fit_seconds"] / (len(fit_ds) * units * fits_per_candidate)
        found = _bisect_noise(parts, audit, deadline)
        entry["points"] = found["points"]
        for p in found["points"]:
            points.append({"candidate": c.name, **p})
        entry["status"] = "passed" if found["chosen"] is not None else "failed"
        entry["reason"] = found["reason"]
        if found["chosen"] is None:
            continue
        pt = found["chosen"]
        entry["noise"] = pt["noise"]
        score = _score(pt)
        if chosen is None or score > _score(chosen[2]):
            chosen = (c, fit, pt, params, fit_on)
        if not preserve or pt["fraction"] >= min(0.99, policy.min_utility_fraction + cfg.room):
            stopped = f"early: {c.name} passed with room"
            break
        if time.perf_counter() > deadline:
            stopped = "budget"
            break
    if chosen is None and stopped == "search space exhausted" and time.perf_counter() > deadline:
        stopped = "budget"
    report["seconds"] = time.perf_counter() - t0
    report["stopped"] = stopped
    report["frontier"] = frontier(points)
    report["feasible"] = None if not infeasible else False
    report["infeasible"] = infeasible
    if chosen is None:
        report["chosen"] = None
        report["verdict"] = _verdict(infeasible, points, policy, base)
        noisy = [s for s in suppress if base.safety[s] >= 0.5 * policy.margin("logreg")]
        if noisy and not infeasible:
            report["verdict"] += (
                f"; {base.n_eval} validation rows measure an accuracy to +-"
                f"{max(base.safety[s] for s in noisy):.3f} (one standard error), half the "
                "policy's margin or more: more rows (or --val) would tell a pass from noise")
        _write_report(out_dir, report, points, None, policy)
        raise CalibrationError(_failure_message(report, base))
    c, fit, pt, params, fit_on = chosen
    if fit is None:  # cross-fitted: the release model is fitted on every training row
        tf = time.perf_counter()
        fit = fit_on(train)
        report["refit_seconds"] = time.perf_counter() - tf
        report["seconds"] = time.perf_counter() - t0
    noise = float(pt["noise"])
    report["chosen"] = {"candidate": c.name, "method": c.method, "noise": noise,
                        "excess": pt["excess"], "fraction": pt["fraction"],
                        "privacy": pt["privacy"], "utility": pt["utility"],
                        "why": _why(pt, policy)}  # fmt: skip
    report["verdict"] = "passed on validation"
    config = resolved_config(c, params, noise, suppress, preserve)
    report["config"] = config
    _write_report(out_dir, report, points, (c.name, noise), policy)
    return CalibrationResult(c, noise, with_output_noise(fit.modifier, noise), fit, config, report)


def _score(pt: dict) -> tuple:
    return (round(pt["fraction"], 6), round(pt["fidelity"], 6), -pt["noise"])


def _bisect_noise(parts, audit: ValidationAudit, deadline: float) -> dict[str, Any]:
    """Smallest level of :data:`NOISE_LEVELS` whose release passes the privacy half, and whose
    next level passes too, found by bisection (privacy is taken to fall with noise); the
    chosen level is then measured whole. ``parts``: (fitted modifier, validation rows) pairs."""
    points: list[dict] = []
    cache: dict[int, dict] = {}

    def at(i: int, full: bool = False) -> dict:
        if i in cache and (cache[i]["complete"] or not full):
            return cache[i]
        t = time.perf_counter()
        xp = np.empty_like(audit.x)
        for model, rows in parts:  # each fitted model releases its own (unseen) rows
            xp[rows] = apply(with_output_noise(model, NOISE_LEVELS[i]), audit.x[rows],
                             audit.seeds[rows])  # fmt: skip
        prior = cache.get(i)
        m = audit.measure(xp, full=full, known=prior)
        m.update(noise=NOISE_LEVELS[i],
                 seconds=time.perf_counter() - t + (prior["seconds"] if prior else 0.0))
        if prior is not None:
            points.remove(prior)
        cache[i] = m
        points.append(m)
        return m

    last = len(NOISE_LEVELS) - 1
    if at(0)["privacy_ok"]:
        hi = 0
    elif time.perf_counter() > deadline:
        reason = "budget exhausted during the noise search"
        return {"points": points, "chosen": None, "reason": reason}
    elif not at(last)["privacy_ok"]:
        return {"points": points, "chosen": None,
                "reason": f"privacy fails even at noise {NOISE_LEVELS[last]}"}  # fmt: skip
    else:
        lo, hi = 0, last
        while hi - lo > 1 and time.perf_counter() < deadline:
            mid = (lo + hi) // 2
            if at(mid)["privacy_ok"]:
                hi = mid
            else:
                lo = mid
            # the smallest passing level is borderline by construction: the next level up must
            # pass too, else that pass was noise and the search goes on above the failure
            if hi - lo <= 1 and hi < last and not at(hi + 1)["privacy_ok"]:
                lo, hi = hi + 1, last
    # complete the chosen level's utility for the report, unless the budget is spent (a
    # partial utility measurement already decides: it stops only once the fraction is kept)
    pt = at(hi, full=time.perf_counter() < deadline)
    if not pt["passed"]:
        reason = ("privacy failed when every family was measured" if not pt["privacy_ok"] else
                  f"utility {pt['fraction']:.3f} of the original at the smallest private noise "
                  f"{pt['noise']}")  # fmt: skip
        return {"points": points, "chosen": None, "reason": reason}
    return {"points": points, "chosen": pt, "reason": f"passes at noise {pt['noise']}"}


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


def _baseline_report(base: Baselines, policy: AuditPolicy) -> dict:
    out = {}
    for s in base.suppress:
        out[s] = {"role": "suppressed", "majority": base.majority[s], "floor": base.floor[s],
                  "original": base.original[s], "safety": base.safety[s],
                  "limit_on_validation": {f: base.baseline(s) + policy.margin(f) - base.safety[s]
                                          for f in base.original[s]}}  # fmt: skip
    for r in base.preserve:
        out[r] = {"role": "preserved", "original": base.original[r], "safety": base.safety[r],
                  "required_fraction": policy.min_utility_fraction + base.safety[r]}  # fmt: skip
    return out


def _infeasible(base: Baselines, policy: AuditPolicy) -> list[str]:
    """Suppressed attributes the preserved labels already give away as well as the data does:
    no release that keeps R can hide them, so the request is refused rather than passed
    vacuously (the floor would make any release, even x itself, 'pass')."""
    out = []
    if not base.preserve:
        return out
    margin = min(policy.margin(f) for f in base.original[base.suppress[0]])
    for s in base.suppress:
        gap = base.best_original(s) - base.floor[s]
        if base.floor[s] > base.majority[s] + margin and gap <= margin:
            out.append(
                f"{s}: the preserved labels {base.preserve} alone predict it at "
                f"{base.floor[s]:.3f} (floor), the original embeddings at "
                f"{base.best_original(s):.3f}; keeping them keeps {s}"
            )
    return out


def _why(pt: dict, policy: AuditPolicy) -> str:
    return (f"best utility among passing candidates: smallest preserved fraction "
            f"{pt['fraction']:.3f} (policy {policy.min_utility_fraction}), worst attacker "
            f"{pt['excess']:+.3f} over max(majority, floor) (margin "
            f"{min(policy.attacker_margin.values()):.2f})")  # fmt: skip


def _verdict(infeasible: list[str], points: list[dict], policy, base: Baselines) -> str:
    if infeasible:
        return "infeasible: " + "; ".join(infeasible)
    private = [p for p in points if p["privacy_ok"] and not math.isnan(p["fraction"])]
    useful = [p for p in points if p["utility_ok"]]
    parts = ["no configuration met the policy on validation"]
    if not points:
        parts.append("nothing was measured within the budget (raise --budget-minutes)")
        return "; ".join(parts)
    if private:
        best = max(p["fraction"] for p in private)
        need = max((policy.min_utility_fraction + base.safety[r] for r in base.preserve),
                   default=policy.min_utility_fraction)  # fmt: skip
        parts.append(f"the best utility with suppression held was {best:.3f} (needs "
                     f"{need:.3f}: {policy.min_utility_fraction} + the safety margin)")
    if useful:
        least = min(p["excess"] for p in useful)
        parts.append(f"the best privacy with utility kept was {least:+.3f} "
                     "over max(majority, floor)")
    if not private and not useful:
        parts.append("looks infeasible within this search: neither half of the policy was met")
    return "; ".join(parts)


def _failure_message(report: dict, base: Baselines) -> str:
    lines = [report["verdict"] + "."]
    for s in base.suppress:
        lines.append(f"  {s}: majority {base.majority[s]:.3f}, leakage floor {base.floor[s]:.3f}, "
                     f"original {base.best_original(s):.3f}")  # fmt: skip
    lines.append("  frontier (best privacy at each utility level; excess = worst attacker minus "
                 "max(majority, floor)):")  # fmt: skip
    for p in report["frontier"] or [{"candidate": "-", "noise": 0, "fraction": float("nan"),
                                      "excess": float("nan")}]:  # fmt: skip
        lines.append(f"    {p['candidate']:<24} noise {p['noise']:<5} utility {p['fraction']:.3f} "
                     f"excess {p['excess']:+.3f}")  # fmt: skip
    lines.append(f"  calibration took {report['seconds']:.0f}s (stopped: {report['stopped']}); "
                 "see calibration.json in the run directory; loosen the policy (--policy), pass "
                 "--budget-minutes, or train an explicit --config")  # fmt: skip
    return "\n".join(lines)


def _write_report(out_dir, report, points, chosen, policy) -> None:
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    report["points"] = [
        {k: p[k] for k in ("candidate", "noise", "privacy", "utility", "excess", "fraction",
                           "fidelity", "privacy_ok", "utility_ok", "passed", "complete")
         if k in p} | {"seconds": p.get("seconds")}
        for p in points
    ]  # fmt: skip
    with open(os.path.join(out_dir, "calibration.json"), "w") as f:
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
    ax.set_ylabel("worst attacker - max(majority, floor) (lower is better)")
    ax.set_title(f"calibration frontier ({seconds:.0f}s)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
