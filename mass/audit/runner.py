"""One audit, end to end: read, join by id, measure (mass.metrics), validate (GX), report."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from mass.audit.data import (
    Labels,
    Release,
    encode_columns,
    positions,
    read_labels,
    read_original,
    read_release,
)
from mass.audit.keyed import is_stochastic, keyless_view, modifier_parts
from mass.audit.policy import AuditPolicy
from mass.audit.suite import JUDGE_COLUMNS, AuditOutcome, SuiteSpec, run_suites
from mass.errors import ConfigError, InputError, MissingInputError
from mass.keys import NOISE_KEY_ENV, OwnerKey, resolve_key
from mass.metrics import KEYED, AttributeReport, attribute_report, z_value
from mass.rows import normalize_rows

log = logging.getLogger(__name__)
MIN_AUDIT_ROWS = 10  # fewer joined rows cannot support k-fold attackers; the suite then fails


@dataclass(frozen=True)
class AuditRequest:
    release: str
    labels: str
    suppress: tuple[str, ...]
    preserve: tuple[str, ...] = ()
    policy: AuditPolicy = field(default_factory=AuditPolicy)
    report_dir: str | None = None
    run_dir: str | None = None
    input: str | None = None
    id_col: str = "id"
    emb_col: str = "emb"
    allow: tuple[str, ...] = ()
    # the owner's noise key for the key-compromised figure; default: $MASS_NOISE_KEY_FILE
    noise_key_file: str | None = None
    noise_key: OwnerKey | None = field(default=None, repr=False)


@dataclass
class AuditResult:
    outcome: AuditOutcome
    reports: list[AttributeReport]
    counts: dict[str, int | None]
    release_meta: dict[str, str]
    released_columns: list[str]
    seconds: float = 0.0
    policy: AuditPolicy | None = None
    key_status: str = ""  # how the key-compromised figure was (or was not) computed
    warnings: list[str] = field(default_factory=list)
    sources: dict[str, str | None] = field(default_factory=dict)  # release/labels/input paths

    @property
    def success(self) -> bool:
        return self.outcome.success


def load_run(run_dir: str) -> tuple[dict, dict]:
    """(frozen branch classifiers by attribute, class encodings) of a training run.

    Loading goes through :func:`mass.branches.load_branches`, the owner of branches.pt.
    """
    path = os.path.join(run_dir, "branches.pt")
    if not os.path.exists(path):
        raise MissingInputError(f"{path}: no branches.pt in the run directory; check --run-dir")
    from mass.branches import load_branches

    classifiers, _agnostic = load_branches(path)
    enc_path = os.path.join(run_dir, "encodings.json")
    encodings = {}
    if os.path.exists(enc_path):
        with open(enc_path) as f:
            encodings = json.load(f)
    return classifiers, encodings


def _original(req: AuditRequest, release: Release, labels: Labels, pos: np.ndarray):
    """Original embeddings aligned to the release rows (NaN where unknown), plus --input."""
    n_input, in_pos = None, None
    if req.input:
        in_ids, in_x = read_original(req.input, id_col=req.id_col, emb_col=req.emb_col)
        n_input, in_pos = len(in_ids), positions(release.ids, in_ids)
    if labels.x is not None:
        src, idx = labels.x, pos
    elif in_pos is not None:
        src, idx = in_x, in_pos
    else:
        raise InputError(
            f"{req.labels}: no '{req.emb_col}' column with the original embeddings; the audit "
            "needs them for the original accuracy: use the held-out features split or --input"
        )
    if src.shape[1] != release.x.shape[1]:
        raise InputError(
            f"{req.release}: embedding dimension {release.x.shape[1]} differs from the "
            f"original's {src.shape[1]}"
        )
    x = np.full(release.x.shape, np.nan, dtype=np.float32)
    x[idx >= 0] = src[idx[idx >= 0]]
    # Branch models (and every modifier, eq. 1) see unit-norm inputs; judge x the same way.
    x = normalize_rows(x)
    x[idx < 0] = np.nan
    return x, n_input, in_pos


def measure(req: AuditRequest) -> tuple[Release, Labels, dict[str, pd.DataFrame], SuiteSpec,
                                        list[AttributeReport], dict]:  # fmt: skip
    """Everything the suites validate: frames + spec, and the per-attribute reports."""
    attrs = list(dict.fromkeys([*req.suppress, *req.preserve]))
    overlap = set(req.suppress) & set(req.preserve)
    if overlap:
        raise ConfigError(f"--preserve: {sorted(overlap)} also in --suppress; pick one role")
    frozen, encodings = load_run(req.run_dir) if req.run_dir else ({}, {})
    release = read_release(req.release, id_col=req.id_col, emb_col=req.emb_col)
    labels = read_labels(req.labels, attrs, id_col=req.id_col, emb_col=req.emb_col,
                         encodings=encodings)  # fmt: skip
    pos = positions(release.ids, labels.ids)
    x_orig, n_input, in_pos = _original(req, release, labels, pos)
    finite = np.isfinite(release.x).all(axis=1)
    norm = np.linalg.norm(np.where(finite[:, None], release.x, 0.0), axis=1)
    rows = pd.DataFrame({"id": release.ids.to_pandas(), "in_labels": pos >= 0,
                         "finite": finite, "norm": np.where(finite, norm, np.nan)})  # fmt: skip
    if in_pos is not None:
        rows["in_input"] = in_pos >= 0
    pol = req.policy
    # Bypass check: a row (nearly) parallel to its original is unmodified, whatever its bytes.
    both = finite & np.isfinite(x_orig).all(axis=1)
    xr = np.where(both[:, None], release.x, 0.0).astype(np.float64)
    cos = np.sum(xr * np.where(both[:, None], x_orig, 0.0), axis=1) / np.maximum(
        np.linalg.norm(xr, axis=1), 1e-30
    )  # x_orig rows are unit-norm already
    rows["cosine"] = np.where(both, cos, np.nan)
    use = (pos >= 0) & both
    x, xp = x_orig[use], release.x[use]
    y = {a: labels.labels[a][pos[use]] for a in attrs}
    extra = encode_columns(release.extra, len(release), max_levels=pol.max_levels)[use]
    key_x, key_status, public_noise = _keyless(req, release, use, extra)
    # noise anyone can recompute protects nothing: its judges are then always required
    gate_key = pol.gate_key_compromised or public_noise
    kw: dict[str, Any] = dict(
        families=pol.families, folds=pol.folds, seed=pol.seed, max_rows=pol.max_rows,
        confidence=pol.confidence, curve=pol.curve, curve_tol=pol.curve_tol,
    )  # fmt: skip
    reports: list[AttributeReport] = []
    if int(use.sum()) >= MIN_AUDIT_ROWS:
        for a in req.suppress:
            if req.run_dir and a not in frozen:
                log.warning("%s: no frozen branch model for '%s'", req.run_dir, a)
            keep = {r: y[r] for r in req.preserve}
            reports.append(
                attribute_report(
                    a,
                    y[a],
                    x,
                    xp,
                    role="suppressed",
                    preserved=keep,
                    frozen=frozen.get(a),
                    margins=pol.margins(a),
                    extra=extra,
                    key_x=key_x,
                    gate_key=gate_key,
                    **kw,
                )
            )
        for a in req.preserve:
            reports.append(attribute_report(a, y[a], x, xp, role="preserved",
                                            frozen=frozen.get(a), min_fraction=pol.fraction(a),
                                            extra=extra, **kw))  # fmt: skip
    allowed = tuple(dict.fromkeys([*pol.allow_columns, *req.allow]))
    forbidden = tuple(req.suppress) + tuple(
        c for c in labels.columns if c not in allowed and c not in req.suppress
    )
    judged = {r.name: r.margins for r in reports if r.role == "suppressed"}
    suppressed = {a: dict(judged.get(a) or pol.margins(a)) for a in req.suppress}
    if gate_key:  # required even when no key figure could be computed
        for a, m in suppressed.items():
            m.update({f + KEYED: pol.margins(a)[f] for f in pol.families})
    spec = SuiteSpec(
        id_col=req.id_col, emb_col=req.emb_col, allowed=allowed, forbidden=forbidden,
        n_labels=len(labels), n_input=n_input, norm_tol=pol.norm_tol,
        suppressed=suppressed, preserved={a: pol.fraction(a) for a in req.preserve},
        max_cosine=pol.max_cosine,
    )  # fmt: skip
    frames = {
        "release_columns": pd.DataFrame(release.columns, columns=["column", "arrow_type"]),
        "release_metadata": pd.DataFrame(list(release.metadata.items()),
                                         columns=["key", "value"]),
        "release_rows": rows,
        "attribute_privacy": judge_frame(reports),
    }  # fmt: skip
    counts = {"release": len(release), "labels": len(labels), "input": n_input,
              "matched": int((pos >= 0).sum()), "nonfinite": int((~finite).sum()),
              "audited": int(use.sum())}  # fmt: skip
    counts["key_status"] = key_status  # type: ignore[assignment]
    return release, labels, frames, spec, reports, counts


def min_rows(chance: float, margin: float, confidence: float) -> int:
    """Rows from which a judge at ``chance`` keeps its upper bound 2 standard errors below
    chance + margin: ((z + 2) / margin)^2 p (1 - p)."""
    z = z_value(confidence)
    return int(np.ceil(((z + 2.0) / max(margin, 1e-6)) ** 2 * chance * (1 - chance)))


def _keyless(req: AuditRequest, release: Release, use: np.ndarray, extra: np.ndarray):
    """(features of the audited rows with the release noise removed, or None; status;
    whether the noise was public).

    A stochastic release whose metadata names no noise key (``mass.noise_key_fingerprint``
    absent or empty) drew its noise from the public ``row_seeds(id)``: it is removed without
    any key, and that view is judged whatever the policy says.
    """
    parts = modifier_parts(release.metadata)
    if parts is None:
        return None, "no mass.modifier metadata: not computed", False
    stochastic = is_stochastic(parts)
    if stochastic is None:
        return None, f"unknown modifier kind in {[k for k, _ in parts]}: not computed", False
    if not stochastic:
        return None, "deterministic modifier: no noise, nothing rests on the key", False
    released = release.metadata.get("mass.noise_key_fingerprint", "")
    ids = release.ids.filter(pa.array(use))
    if not released:
        view = keyless_view(release.x[use], ids, parts, None)
        status = (f"release noise is not keyed (no mass.noise_key_fingerprint): anyone removes "
                  f"it from the public ids; stripped {list(view.stripped)}"
                  + (f", noise as features {list(view.appended)}" if view.appended else "")
                  + "; judged")  # fmt: skip
        x = np.hstack([view.x, extra]) if extra.shape[1] else view.x
        return x, status, True
    key = req.noise_key or resolve_key(req.noise_key_file, NOISE_KEY_ENV)
    if key is None:
        return None, f"no noise key (--noise-key-file or ${NOISE_KEY_ENV}): not computed", False
    if released != key.fingerprint:
        log.warning("%s: release noise key %s is not the given key %s; no key-compromised "
                    "figure", req.release, released, key.fingerprint)  # fmt: skip
        status = f"key {key.fingerprint} is not the release's ({released}): not computed"
        return None, status, False
    view = keyless_view(release.x[use], ids, parts, key,
                        context=release.metadata.get("mass.sha256", ""))  # fmt: skip
    x = np.hstack([view.x, extra]) if extra.shape[1] else view.x
    status = f"key {key.fingerprint}: stripped {list(view.stripped)}"
    if view.appended:
        status += f", noise as features {list(view.appended)}"
    return x, status, False


def judge_frame(reports: list[AttributeReport]) -> pd.DataFrame:
    """One row per (attribute, judge): the numbers the custom expectations validate."""
    nan = float("nan")
    recs = [
        {"attribute": r.name, "role": r.role, "judge": judge, "accuracy": acc,
         "majority": r.majority, "floor": r.floor, "original": r.original,
         "balanced": r.balanced.get(judge, nan), "ci_high": r.ci_high.get(judge, nan),
         "balanced_ci_high": r.balanced_ci_high.get(judge, nan), "chance": r.chance,
         "balanced_floor": r.balanced_floor}
        for r in reports for judge, acc in r.accuracies.items()
    ]  # fmt: skip
    return pd.DataFrame(recs, columns=list(JUDGE_COLUMNS))


def run_audit(req: AuditRequest) -> AuditResult:
    """Measure, validate with GX (Data Docs into report_dir/data_docs) and return the result."""
    t0 = time.perf_counter()
    release, _labels, frames, spec, reports, counts = measure(req)
    docs = os.path.join(req.report_dir, "data_docs") if req.report_dir else None
    outcome = run_suites(frames, spec, docs_dir=docs)
    key_status = str(counts.pop("key_status", ""))
    warnings = []
    for r in reports:
        if r.climbing:
            steps = ", ".join(
                f"{f} {r.learning_curve[f][-2][1]:.3f} -> {r.learning_curve[f][-1][1]:.3f}"
                for f in r.climbing
            )
            warnings.append(
                f"{r.name}: learning curve still climbing at 100% of the attack training set "
                f"({steps}): an attacker with more labelled rows may do better than measured"
            )
    for r in reports:
        need = min_rows(r.baseline, min(r.margins.values(), default=0.05), req.policy.confidence)
        if r.role == "suppressed" and r.n < need:
            warnings.append(
                f"{r.name}: {r.n} audited rows; a judge at chance has a 95% upper bound only "
                f"~2 standard errors below the limit from {need} rows on: with fewer, a clean "
                "release can fail by chance (audit more rows, not a wider margin)"
            )
    for w in warnings:
        log.warning("%s", w)
    return AuditResult(outcome=outcome, reports=reports, counts=counts,
                       release_meta=release.metadata,
                       released_columns=[c for c, _ in release.columns],
                       seconds=time.perf_counter() - t0, policy=req.policy,
                       key_status=key_status, warnings=warnings,
                       sources={"release_path": req.release, "labels_path": req.labels,
                                "input_path": req.input})  # fmt: skip
