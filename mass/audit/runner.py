"""One audit, end to end: read, join by id, measure (mass.metrics), validate (GX), report."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from mass.audit.certified import calibrated_size_hint, certificate_rows, with_certificate
from mass.audit.columns import Statistics, combine, encode_released
from mass.audit.data import encode_columns
from mass.audit.expectations import JUDGE_COLUMNS
from mass.audit.keyed import keyless_view
from mass.audit.policy import AuditPolicy, check_overrides
from mass.audit.scan import Scan, scan
from mass.audit.stream import PARTITION_ROWS
from mass.audit.suite import AuditOutcome, SuiteSpec, Validator
from mass.audit.unnamed import check_watch, effective_watch, measure_unnamed, watch_frame
from mass.audit.vacuity import vacuous
from mass.errors import ConfigError, VacuousPolicyError
from mass.keys import LOCAL_CONFIG, NOISE_KEY_ENV, OwnerKey, resolve_key
from mass.metrics import KEYED, AttributeReport, attribute_report, z_value
from mass.metrics.certificate import cells_of
from mass.metrics.rules import FROZEN_READER, judge_limit
from mass.metrics.scores import FROZEN
from mass.noise_streams import is_stochastic, modifier_parts
from mass.rundir import load_judges

log = logging.getLogger(__name__)
MIN_AUDIT_ROWS = 10  # fewer joined rows cannot support k-fold attackers; the suite then fails


@dataclass(frozen=True)
class AuditRequest:
    release: str
    labels: str
    suppress: tuple[str, ...]
    preserve: tuple[str, ...] = ()
    # labelled attributes neither suppressed nor preserved: what the release keeps of them
    # (empty: the policy's audit.watch)
    watch: tuple[str, ...] = ()
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
    partition_rows: int = PARTITION_ROWS  # rows per id-hash partition (mass.audit.stream)
    # rows at or above max_cosine the anonymize job verified as the signed modifier's own
    # output (mass.batches.reference); the cosine expectation lets at most this many through
    verified_near: int = 0
    # `mass audit --model`: the signed modifier recomputes the near rows here, and those that
    # are its own output are verified too (mass.audit.recompute.NearRecompute)
    near: Any = None


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
    id_col: str = "id"
    forced_policy: list[str] = field(default_factory=list)  # why the policy was vacuous
    # watch attributes and label-free structure (mass.audit.unnamed.measure_unnamed)
    unnamed: dict = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.outcome.success


def _release_training_rows(s: Scan, pol) -> float | None:
    """The rows an attacker of the whole release trains on in the gate's cross-validation
    (the release's rows, (folds - 1)/folds of them), when the attackers judged fewer (a
    sample of ``policy.max_rows``, or labels for part of the release): the suppressed judges'
    bounds are then projected there (:mod:`mass.metrics.growth`)."""
    n_rel, n_judged = int(s.counts.get("release") or 0), 0 if s.x is None else len(s.x)
    return n_rel * (pol.folds - 1) / pol.folds if n_rel > n_judged else None


def _names(s: Scan, attr: str):
    enc = s.encodings.get(attr)
    return None if enc is None else enc.classes


def measure(req: AuditRequest, validator: Validator) -> tuple[Scan, dict[str, pd.DataFrame],
                                                          SuiteSpec, list[AttributeReport], dict]:  # fmt: skip
    """One streaming pass (the row checks validated into ``validator``, partition by
    partition), then the attackers on the seeded sample; the other suites' frames + spec,
    the reports and the unnamed-utility section."""
    watch = effective_watch(req.watch, req.policy.watch, _label_columns(req.labels),
                            where=f"--labels {req.labels}")  # fmt: skip
    attrs = list(dict.fromkeys([*req.suppress, *req.preserve, *watch]))
    overlap = set(req.suppress) & set(req.preserve)
    if overlap:
        raise ConfigError(f"{sorted(overlap)}: both preserved and suppressed; pick one role")
    check_watch(watch, req.suppress, req.preserve)
    check_overrides(req.policy, req.suppress, req.preserve)
    frozen, encodings = load_judges(req.run_dir) if req.run_dir else ({}, {})
    pol = req.policy
    # the column expectations of release_rows do not depend on the counts known after the scan
    validator.spec = _spec(req, 0, 0 if req.input else None, [])
    whole: list[pd.DataFrame] = []

    def sink(i: int, n_parts: int, frame: pd.DataFrame) -> None:
        if n_parts == 1:
            whole.append(frame)  # one partition: the suite runs on it whole, as it always did
        else:
            validator.validate_rows_part(i, frame)

    s = scan(req, sink, attrs=attrs, encodings=encodings)
    if req.near is not None:  # the near rows this audit recomputed with the signed modifier
        s.counts["recomputed_near"] = req.near.recomputed
        req = replace(req, verified_near=req.verified_near + req.near.own)
    n_audit = 0 if s.x is None else len(s.x)
    extra = encode_columns(s.extra, n_audit, max_levels=pol.max_levels) if n_audit else None
    key_x, key_status, public_noise = _keyless(req, s, extra) if n_audit else (
        None, "no audited rows: not computed", False)  # fmt: skip
    # noise anyone can recompute protects nothing: its judges are then always required
    gate_key = pol.gate_key_compromised or public_noise
    kw: dict[str, Any] = dict(
        families=pol.families, folds=pol.folds, seed=pol.seed, max_rows=pol.max_rows,
        confidence=pol.confidence, curve=pol.curve, curve_tol=pol.curve_tol,
    )  # fmt: skip
    reports: list[AttributeReport] = []
    unnamed: dict = {}
    if s.counts["audited"] >= MIN_AUDIT_ROWS:
        x, xp, y = s.x, s.xp, s.y
        # every released column besides the embedding, the ids included, judged alone; the
        # allowed columns also with the embedding (structure + per-value label statistics,
        # mass.audit.columns). Ids are judged alone only: their ~20 features beside the
        # embedding reshuffle the combined judges' chance on small audits. The label
        # statistics go to the judges of one column alone: beside the embedding, (k-1) x ~13
        # statistics per column overfit the combined judges (both measured: docs/audit.md,
        # "Every released column, ids included").
        released = encode_released({req.id_col: s.ids, **s.extra}, max_levels=pol.max_levels)
        together = combine([released[c] for c in s.extra], n_audit)
        together = replace(together, stats=Statistics((), ()))
        cells = cells_of(xp)  # each row's released vector's code: the certificate, capacity
        for a in req.suppress:
            if req.run_dir and a not in frozen:
                log.warning("%s: no frozen branch model for '%s'", req.run_dir, a)
            keep = {r: y[r] for r in req.preserve}
            reports.append(attribute_report(
                a, y[a], x, xp, role="suppressed", preserved=keep, frozen=frozen.get(a),
                margins=pol.margins(a), extra=together.dense, stats=together.stats,
                columns=released, key_x=key_x, gate_key=gate_key, class_names=_names(s, a),
                project_rows=_release_training_rows(s, pol), **kw,
            ))  # fmt: skip
            reports[-1] = with_certificate(reports[-1], cells, y[a], s.metadata, pol)
        for a in req.preserve:
            reports.append(attribute_report(a, y[a], x, xp, role="preserved",
                                            frozen=frozen.get(a), min_fraction=pol.fraction(a),
                                            extra=extra, class_names=_names(s, a),
                                            frozen_family=FROZEN_READER, **kw))  # fmt: skip
        unnamed = measure_unnamed(x, xp, y, suppress=req.suppress, preserve=req.preserve,
                                  watch=watch, policy=pol, extra=extra,
                                  names={w: _names(s, w) for w in watch},
                                  cells=cells if watch else None)  # fmt: skip
    spec = _spec(req, s.n_labels, s.n_input, reports, gate_key=gate_key, watch=watch,
                 label_columns=s.label_columns)  # fmt: skip
    validator.spec = spec
    if whole:
        validator.validate("release_rows", whole[0])
    else:
        validator.finish_rows(s.counts["release"] or 0)
    frames = {
        "release_columns": pd.DataFrame(s.columns, columns=["column", "arrow_type"]),
        "release_metadata": pd.DataFrame(list(s.metadata.items()), columns=["key", "value"]),
        "attribute_privacy": judge_frame(reports),
        "watch_utility": watch_frame(unnamed),
    }
    s.counts["key_status"] = key_status  # type: ignore[assignment]
    s.counts["verified_near"] = int(req.verified_near)  # the job's in-process recompute
    return s, frames, spec, reports, unnamed


def _label_columns(spec: str) -> list[str]:
    from mass.io import expand_paths, schema_of

    try:
        return list(schema_of(expand_paths(spec)[0]).names)
    except Exception:  # noqa: BLE001  (the scan names an unreadable labels file properly)
        return []


def _spec(req: AuditRequest, n_labels: int, n_input: int | None, reports, *,
          gate_key: bool = False, label_columns: list[str] | None = None,
          watch: tuple[str, ...] = ()) -> SuiteSpec:  # fmt: skip
    pol = req.policy
    allowed = tuple(dict.fromkeys([*pol.allow_columns, *req.allow]))
    forbidden = tuple(req.suppress) + tuple(
        c for c in (label_columns or []) if c not in allowed and c not in req.suppress
    )
    judged = {r.name: r.margins for r in reports if r.role == "suppressed"}
    suppressed = {a: dict(judged.get(a) or pol.margins(a)) for a in req.suppress}
    if gate_key:  # required even when no key figure could be computed
        for a, m in suppressed.items():
            m.update({f + KEYED: pol.margins(a)[f] for f in pol.families})
    return SuiteSpec(
        id_col=req.id_col, emb_col=req.emb_col, allowed=allowed, forbidden=forbidden,
        n_labels=n_labels, n_input=n_input, norm_tol=pol.norm_tol,
        suppressed=suppressed, preserved={a: pol.fraction(a) for a in req.preserve},
        max_cosine=pol.max_cosine, verified_near=int(req.verified_near),
        watch_min_kept=pol.watch_min_kept if watch else None,
    )  # fmt: skip


# the phrase that starts :func:`none_can_pass`'s warning (the gate repeats such warnings)
NONE_CAN_PASS = "no release of these"


def none_can_pass(r: AttributeReport, y: np.ndarray | None, encoding=None) -> str | None:
    """Why no release of these audited rows can pass suppressed attribute ``r``, if none can:
    a judge at chance (the constant guess of the commonest class, what a retrained attacker of a
    perfectly suppressed release predicts) already has a balanced 95% upper bound over the
    limit, because a class has too few rows to bound its recall. None when one could pass."""
    if r.role != "suppressed" or y is None or not r.balanced_ci_high or not len(y):
        return None
    from mass.metrics.scores import balanced_upper

    classes, counts = np.unique(y, return_counts=True)
    guess = np.full(len(y), classes[np.argmax(counts)])
    bound = balanced_upper(y, guess, z_value(r.confidence))
    limit = judge_limit(r.balanced_baseline, min(r.margins.values(), default=0.05))
    if bound <= limit:
        return None
    rare = int(np.argmin(counts))
    name = encoding.classes[int(classes[rare])] if encoding is not None else classes[rare]
    return (
        f"{r.name}: {NONE_CAN_PASS} {len(y)} audited rows can pass: even a judge at "
        f"chance (a constant guess) has a balanced 95% upper bound of {bound:.3f}, over the "
        f"limit {limit:.3f}, because class {name!r} has only {int(counts[rare])} "
        f"row{'' if counts[rare] == 1 else 's'}; "
        "audit more rows of it, merge it into another class, or drop the attribute"
    )


def min_rows(chance: float, margin: float, confidence: float, counts=None) -> int:
    """Rows from which a judge at ``chance`` keeps its upper bound 2 standard errors below
    chance + margin: ((z + 2) / margin)^2 p (1 - p). With ``counts`` (the rows of each class
    of the attribute) the balanced judge's too, at the same class shares pi_c: a judge
    independent of the attribute recalls each of its k classes at 1/k, and the mean of those
    recalls has variance sum_c (1/k)(1 - 1/k) / (pi_c N) / k^2, so N >= ((z + 2) / margin)^2
    (1/k)(1 - 1/k) / k^2 sum_c 1 / pi_c: the larger of the two. A rare class sets it (the
    balanced bound of a clean release is as wide as its rarest class's recall is uncertain;
    docs/audit.md, "Confidence bounds")."""
    z = z_value(confidence)
    scale = ((z + 2.0) / max(margin, 1e-6)) ** 2
    need = scale * chance * (1 - chance)
    counts = np.asarray([] if counts is None else counts, dtype=np.float64)
    counts = counts[counts > 0]
    if counts.size >= 2:
        k = counts.size
        need = max(
            need, scale * (1 / k) * (1 - 1 / k) / k**2 * float(np.sum(counts.sum() / counts))
        )
    return int(np.ceil(need))


def too_few_rows(r: AttributeReport, y: np.ndarray | None, confidence: float) -> str | None:
    """The audit's warning when suppressed attribute ``r`` was judged on fewer rows than
    :func:`min_rows` asks for (its balanced judges' need at the class shares of ``y``
    included), else None."""
    if r.role != "suppressed":
        return None
    counts = class_counts(y) if r.balanced_ci_high else None
    need = min_rows(r.baseline, min(r.margins.values(), default=0.05), confidence, counts)
    if r.n >= need:
        return None
    rare = (f" (its rarest class has {int(min(counts))} of them: the balanced bound is as wide "
            "as that class's recall is uncertain)" if counts is not None and len(counts) > 1
            else "")  # fmt: skip
    return (
        f"{r.name}: {r.n} audited rows{rare}; a judge at chance has a 95% upper bound only "
        f"~2 standard errors below the limit from {need} rows on: with fewer, a clean "
        "release can fail by chance (audit more rows, not a wider margin)"
    )


def class_counts(y) -> np.ndarray:
    """The rows of each class present in the labels ``y`` (empty for none)."""
    return np.unique(np.asarray(y), return_counts=True)[1] if y is not None else np.array([])


def _keyless(req: AuditRequest, s: Scan, extra: np.ndarray):
    """(features of the audited rows with the release noise removed, or None; status;
    whether the noise was public).

    A stochastic release whose metadata names no noise key (``mass.noise_key_fingerprint``
    absent or empty) drew its noise from the public ``row_seeds(id)``: it is removed without
    any key, and that view is judged whatever the policy says.
    """
    parts = modifier_parts(s.metadata)
    if parts is None:
        return None, "no mass.modifier metadata: not computed", False
    stochastic = is_stochastic(parts)
    if stochastic is None:
        return None, f"unknown modifier kind in {[k for k, _ in parts]}: not computed", False
    if not stochastic:
        status = "deterministic modifier: no noise, nothing rests on the key"
        if not req.policy.gate_key_compromised:
            return None, status, False
        # the gate requires the key judges: an attacker holding the key sees the release itself
        x = np.hstack([s.xp, extra]) if extra.shape[1] else s.xp
        return x, status + " (the key-compromised view is the release)", False
    released = s.metadata.get("mass.noise_key_fingerprint", "")
    ids = s.ids
    if not released:
        view = keyless_view(s.xp, ids, parts, None)
        status = (f"release noise is not keyed (no mass.noise_key_fingerprint): anyone removes "
                  f"it from the public ids; stripped {list(view.stripped)}"
                  + (f", noise as features {list(view.appended)}" if view.appended else "")
                  + "; judged")  # fmt: skip
        x = np.hstack([view.x, extra]) if extra.shape[1] else view.x
        return x, status, True
    key = req.noise_key or resolve_key(req.noise_key_file, NOISE_KEY_ENV)
    if key is None:
        where = f"--noise-key-file, ${NOISE_KEY_ENV}, {LOCAL_CONFIG}"
        return None, f"no noise key ({where}): not computed", False
    if released != key.fingerprint:
        log.warning("%s: release noise key %s is not the given key %s; no key-compromised "
                    "figure", req.release, released, key.fingerprint)  # fmt: skip
        status = f"key {key.fingerprint} is not the release's ({released}): not computed"
        return None, status, False
    view = keyless_view(s.xp, ids, parts, key,
                        context=s.metadata.get("mass.sha256", ""))  # fmt: skip
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
         "majority": r.majority, "floor": r.floor,
         # the frozen judge is read against its own accuracy on the original rows
         "original": r.frozen_x if judge == FROZEN and r.frozen_x is not None else r.original,
         "balanced": r.balanced.get(judge, nan), "ci_high": r.ci_high.get(judge, nan),
         "balanced_ci_high": r.balanced_ci_high.get(judge, nan), "chance": r.chance,
         "balanced_floor": r.balanced_floor}
        for r in reports for judge, acc in r.accuracies.items()
    ]  # fmt: skip
    recs += certificate_rows(reports)  # judged only where the margins name it
    return pd.DataFrame(recs, columns=list(JUDGE_COLUMNS))


def run_audit(req: AuditRequest) -> AuditResult:
    """Measure, validate with GX (Data Docs into report_dir/data_docs) and return the result.

    A vacuous policy (:func:`vacuous`) raises :class:`VacuousPolicyError` unless the policy
    says ``force_vacuous: true``; a forced one is recorded in the result (``forced_policy``).
    """
    t0 = time.perf_counter()
    docs = os.path.join(req.report_dir, "data_docs") if req.report_dir else None
    validator = Validator(_spec(req, 0, None, []), docs_dir=docs)
    s, frames, _spec_final, reports, unnamed = measure(req, validator)
    forced = vacuous(reports)
    if forced and not req.policy.force_vacuous:
        raise VacuousPolicyError(
            f"{req.release}: the audit policy cannot fail: {'; '.join(forced)}; fix the policy "
            "(margins, --suppress/--preserve), or set audit.force_vacuous: true to run it "
            "anyway (shown as FORCED in report.html and _RELEASE.md); nothing was published"
        )
    for why in forced:
        log.warning("forced vacuous policy: %s", why)
    for name in ("release_columns", "release_metadata", "attribute_privacy", "watch_utility"):
        validator.validate(name, frames[name])
    outcome = validator.finish()
    counts = s.counts
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
    warnings += [w for r in reports
                 if (w := too_few_rows(r, s.y.get(r.name), req.policy.confidence))]  # fmt: skip
    warnings += [w for r in reports
                 if (w := none_can_pass(r, s.y.get(r.name), s.encodings.get(r.name)))]  # fmt: skip
    warnings += calibrated_size_hint(reports, req.run_dir)
    for w in warnings:
        log.warning("%s", w)
    return AuditResult(outcome=outcome, reports=reports, counts=counts,
                       release_meta=s.metadata,
                       released_columns=[c for c, _ in s.columns],
                       seconds=time.perf_counter() - t0, policy=req.policy, unnamed=unnamed,
                       key_status=key_status, warnings=warnings,
                       sources={"release_path": req.release, "labels_path": req.labels,
                                "input_path": req.input}, id_col=req.id_col,
                       forced_policy=forced)  # fmt: skip
