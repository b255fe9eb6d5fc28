"""The anonymize job's audit gate, decided before any data moves and run on the STAGED
release (a failing audit publishes nothing): the attributes and their labels
(:func:`audit_plan`), the --allow-columns proxy check (:func:`check_allowed`), and the audit
itself with its report (:func:`audit_staged`; local or object-store report directory,
:func:`mass.audit.into.audit_into`). Labels, policy and report come from the job's plan
(:class:`beam_pipelines.plan.AnonymizeJob`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass import fs
from mass.batches.validate import CheckedInput
from mass.errors import AuditFailedError, ConfigError, UnreadableInputError, VacuousPolicyError
from mass.io import expand_paths, read_table
from mass.metrics import column_of
from mass.release.commit import private_dir
from mass.report.view import unjudged_key_view

if TYPE_CHECKING:
    from beam_pipelines.plan import AnonymizeJob

log = logging.getLogger("mass.anonymize")


@dataclass(frozen=True)
class AuditPlan:
    """What the gate audits, decided before any work (see :func:`audit_plan`); labels, policy
    and report are the job's (``job.labels``, ``job.policy``, ``job.report``)."""

    suppress: tuple[str, ...]
    preserve: tuple[str, ...]
    watch: tuple[str, ...] = ()  # --watch, else the policy's audit.watch (mass.audit.unnamed)


@dataclass(frozen=True)
class AllowCheck:
    """What :func:`check_allowed` decided: the proxies released under --force-allow, and the
    verdict of each allow-listed column."""

    forced: tuple[str, ...] = ()
    verdicts: tuple = ()  # mass.batches.allow_check verdicts


def check_allowed(job: AnonymizeJob, plan: AuditPlan | None, checked: CheckedInput) -> AllowCheck:
    """With the gate's labels at hand, judge each --allow-columns column ALONE against each
    suppressed attribute by the audit's rule, before any inference
    (:mod:`mass.batches.allow_check`): a proxy is refused unless --force-allow, which records
    it in ``mass.forced_columns``. Without labels (--no-audit) only the name rules apply."""
    if plan is None or not job.allow_columns:
        return AllowCheck()
    from mass.batches.allow_check import check_allow_columns

    forced, verdicts = check_allow_columns(
        input_files=list(checked.files), labels=job.labels, id_col=job.id_col,
        columns=list(job.allow_columns), suppress=list(plan.suppress),
        preserve=list(plan.preserve), policy=job.policy, force=job.force_allow,
    )  # fmt: skip
    if verdicts:
        rows = verdicts[0].rows
        print(f"anonymize: --allow-columns judged alone against {list(plan.suppress)} on "
              f"{rows} labelled rows: " + (f"FORCED {forced}" if forced else "none predicts "
              "a suppressed attribute above the policy"), flush=True)  # fmt: skip
    return AllowCheck(forced=tuple(forced), verdicts=tuple(verdicts))


def audit_plan(job: AnonymizeJob, info: dict, schema: pa.Schema) -> AuditPlan | None:
    """Decide the gate before any data moves: labels at hand -> audit; none -> refuse
    unless --no-audit (the release is then recorded as unaudited)."""
    suppress = tuple(info.get("suppress") or ())
    preserve = tuple(info.get("preserve") or ())
    if not job.audit:
        log.warning("--no-audit: publishing without an audit; the release records audited: "
                    "false (mass.audited, _release.json)")  # fmt: skip
        return None
    model = info.get("name") or job.model
    if not suppress:
        raise ConfigError(
            f"model '{model}' names no suppressed attribute (export.json 'suppress'), so "
            "its release cannot be audited; pass --no-audit to publish it unaudited (recorded)"
        )
    from mass.audit.unnamed import check_watch, effective_watch

    if job.labels:
        first = expand_paths(job.labels)[0]
        try:
            names = pq.read_schema(first).names
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableInputError(
                f"--labels {first}: not readable as Parquet ({e}); pass the held-out labels file"
            ) from e
        where = f"--labels {job.labels}"
    else:
        names, where = schema.names, f"--input {job.input}"
    watch = effective_watch(job.watch, job.policy.watch, names, where=where)
    check_watch(watch, suppress, preserve)
    from mass.audit.policy import check_overrides

    check_overrides(job.policy, suppress, preserve)  # before any data moves
    wanted = list(dict.fromkeys([*suppress, *preserve, *watch]))
    missing = [a for a in wanted if a not in names] + (
        [job.id_col] if job.id_col not in names else []
    )
    if missing:
        raise ConfigError(
            f"{where}: no column(s) {missing} for the audit of model '{model}' (suppress "
            f"{list(suppress)}, preserve {list(preserve)}, watch {list(watch)}); the release is audited before "
            "publication: pass --labels LABELS (id + those columns), or --no-audit to publish "
            "it unaudited (recorded in the release metadata)"
        )
    # printed like the summary line: the root logger is at WARNING until Beam's run starts
    print(f"anonymize: audit gate on: labels from {job.labels or f'the input columns {wanted}'}"
          f"; policy from {job.policy_source}; report to {job.report}", flush=True)  # fmt: skip
    return AuditPlan(suppress=suppress, preserve=preserve, watch=watch)


def audit_staged(
    job: AnonymizeJob, plan: AuditPlan, staged: str, q_ids: pa.Array | None, *, aux: str,
    verified: int = 0,
) -> dict:  # fmt: skip
    """The gate: audit the staged release; raise :class:`AuditFailedError` (the report is
    written either way) so that nothing is published unless it passes. ``aux``: a private
    directory for the labels without the quarantined rows. ``verified``: rows the writer found
    at or above the policy's max_cosine and verified as the signed modifier's own output
    (:mod:`mass.batches.reference`); the audit lets at most that many through."""
    from mass.audit import AuditRequest
    from mass.audit.into import audit_into

    attrs = list(dict.fromkeys([*plan.suppress, *plan.preserve, *plan.watch]))
    labels, original = job.labels, None
    if labels is None:  # the input's own label columns (and its embeddings as the original)
        labels = job.input
        if q_ids is not None:
            labels = _valid_rows(job, aux, [job.id_col, job.emb_col, *attrs], q_ids)
    else:
        original = job.input
        if q_ids is not None:
            original = _valid_rows(job, aux, [job.id_col, job.emb_col], q_ids)
        labels = _released_labels(job, aux, staged)
    report = str(job.report)
    req = AuditRequest(
        release=staged, labels=labels, suppress=plan.suppress, preserve=plan.preserve,
        watch=plan.watch, policy=job.policy, report_dir=report, run_dir=job.run_dir,
        input=original, id_col=job.id_col, emb_col=job.emb_col, allow=job.allow_columns,
        verified_near=verified,
    )  # fmt: skip
    try:
        _, metrics = audit_into(req, report)  # local or object store
    except VacuousPolicyError as e:  # named by the release, not the staging removed on exit
        raise VacuousPolicyError(
            str(e).replace(staged, f"{job.output} (staged, not published)")
        ) from e
    path = fs.join(report, "audit.json")
    if not metrics.get("pass"):
        kept = (f"a previous release at {job.output} is kept" if fs.exists(job.output)
                else f"nothing is at {job.output}")  # fmt: skip
        from mass.audit.runner import NONE_CAN_PASS  # the audit's own phrase, read lazily

        hopeless = [w for w in metrics.get("warnings") or [] if NONE_CAN_PASS in w]
        raise AuditFailedError(
            f"{job.output}: the staged release failed its audit ({_failures(metrics)}); "
            f"report: {report}; nothing published ({kept})" + "".join(f"; {w}" for w in hopeless)
        )
    log.info("audit passed: %s", path)
    return {"verdict": "pass", "report": path, "policy": job.policy_source}


def mark_not_published(verdict: dict, output: str, error: BaseException) -> None:
    """The audit passed but the release was not published (interrupted, or the commit
    failed): its audit.json says so (``published: false`` and why), so that a passing report
    is never read as a published release. Best effort: the original error is what propagates."""
    path = verdict.get("report")
    if not path:
        return
    why = "interrupted (SIGINT)" if isinstance(error, KeyboardInterrupt) else (
        f"{type(error).__name__}: {error}")  # fmt: skip
    try:
        doc = fs.read_json(path)
        doc.update(published=False, not_published=f"{output}: nothing published after the "
                   f"audit passed: {why}")  # fmt: skip
        fs.write_json(path, doc)
    except Exception as e:  # noqa: BLE001 - the report is secondary to the error raised
        log.error("could not mark %s as not published: %s", path, e)


def _over_own_limit(what: str, bounds: dict, limits: dict) -> str:
    over = {j: b - limits[j] for j, b in bounds.items()
            if isinstance(b, float) and isinstance(limits.get(j), float)}  # fmt: skip
    if not over:
        return f"no {what}95% upper bound with a limit"
    j = max(over, key=over.__getitem__)
    return f"{what}95% upper bound of {j} {bounds[j]:.3f} vs its limit {limits[j]:.3f}"


def _column_verdict(row: dict, col: str) -> str:
    """What a released column's judges (``family@col``) found: a reading over the limit, or
    only bounds over it, their readings within it (too few rows to rule a leak out)."""
    over, best = False, None
    for key, points in (("limits", row), ("balanced_limits", row.get("balanced") or {})):
        for j, limit in (row.get(key) or {}).items():
            point = points.get(j)
            if column_of(j) == col and isinstance(point, float) and isinstance(limit, float):
                over = over or point > limit
                if points is row:
                    best = point if best is None else max(best, point)
    if over or best is None:
        return "alone predicts it"
    return (
        f"is read at most {best:.3f} by its judges, within the limit, but on {row.get('n')} "
        "audited rows their 95% upper bounds exceed it: too few rows to rule a leak out"
    )


def _failures(metrics: dict) -> str:
    """``attribute 'digit' (suppressed: worst 0.91, limit 0.16), ...`` + other expectations.
    A suppressed attribute whose gated key-compromised view had no figure (it fails closed)
    says why, since its bounds on the release may all be within the limit."""
    parts = []
    for name, row in (metrics.get("attributes") or {}).items():
        if row.get("pass"):
            continue
        nums = [f"worst {row['worst']:.3f}"] if isinstance(row.get("worst"), float) else []
        for what, key, lim in (
            ("", "ci_high", "limit"),
            ("balanced ", "balanced_ci_high", "balanced_limit"),
        ):
            bounds = [v for v in (row.get(key) or {}).values() if isinstance(v, float)]
            if row.get("role") == "suppressed" and bounds:  # the rule judges upper bounds
                limit = row.get(lim)
                if isinstance(limit, dict):  # mixed margins: the judge furthest over its own
                    nums.append(_over_own_limit(what, row.get(key) or {}, limit))
                    continue
                nums.append(
                    f"highest {what}95% upper bound {max(bounds):.3f}"
                    + (f" vs limit {limit:.3f}" if isinstance(limit, float) else "")
                )
        id_col = (metrics.get("release") or {}).get("id_col")
        for col in row.get("leaking_columns") or []:
            what = "the id column" if col == id_col else "released column"
            nums.append(f"{what} '{col}' {_column_verdict(row, col)}")
        if row.get("role") != "suppressed" and isinstance(row.get("limit"), float):
            nums.append(f"limit {row['limit']:.3f}")
        key_status = unjudged_key_view(metrics, row)
        if key_status is not None:
            nums.append(
                f"its key-compromised view (audit.gate_key_compromised) was not "
                f"judged: {key_status}"
            )
        parts.append(f"attribute '{name}' ({row.get('role')}{': ' if nums else ''}"
                     f"{', '.join(nums)})")  # fmt: skip
    names = [f"'{n}'" for n, r in (metrics.get("attributes") or {}).items() if not r.get("pass")]
    other = [e for e in metrics.get("failed_expectations") or []
             if not any(n in e for n in names)]  # fmt: skip
    if other:
        more = " other" if parts else ""
        parts.append(f"{len(other)}{more} failed expectation(s), first: {other[0]}")
    return "; ".join(parts) or "no passing verdict in audit.json"


def _released_labels(job: AnonymizeJob, aux: str, staged: str) -> str:
    """--labels as the audit reads them: the rows of the released ids only, as a private
    Parquet file in ``aux`` when the labels hold others (the rows the job quarantined, ids a
    wider labels table holds beyond this input), else the file itself. An id of the release
    without labels stays missing, and the audit fails on it."""
    from mass.audit.stream import footer_rows

    if footer_rows(expand_paths(job.labels)) == footer_rows(expand_paths(staged)):
        return job.labels  # as many rows: the audit checks they are the same ids
    released = read_table(staged, columns=[job.id_col]).column(job.id_col).combine_chunks()
    table = read_table(job.labels)
    keep = pc.is_in(table.column(job.id_col), value_set=released)
    return _private_table(aux, "labels", table.filter(keep))


def _private_table(aux: str, name: str, table: pa.Table) -> str:
    private_dir(aux)  # the labels (and the input's embeddings) of the audited rows
    n = len(fs.listdir(aux)) if fs.isdir(aux) else 0
    path = fs.join(aux, f"{name}-{n}.parquet")
    with fs.atomic_output(path) as f:
        pq.write_table(table, f)
    return path


def _valid_rows(job: AnonymizeJob, aux: str, columns: list[str], q_ids: pa.Array) -> str:
    """The input's ``columns`` without the quarantined rows, as a private Parquet file in
    ``aux`` for the audit (its readers refuse the NaN/ragged rows the job quarantined)."""
    table = read_table(job.input, columns=columns)
    keep = pc.invert(pc.is_in(table.column(job.id_col), value_set=q_ids))
    return _private_table(aux, "valid", table.filter(keep))
