"""The anonymize job's audit gate, decided before any data moves and run on the STAGED
release (a failing audit publishes nothing): labels and policy (:func:`_audit_plan`), the
--allow-columns proxy check (:func:`_check_allowed`), and the audit itself with its report
(:func:`_audit_staged`; local or object-store report directory, :func:`mass.audit.into.
audit_into`). Split out of :mod:`beam_pipelines.anonymize`, which imports these names.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass import fs
from mass.errors import AuditFailedError, ConfigError, UnreadableInputError
from mass.io import expand_paths, read_table
from transforms.validate import CheckedInput

log = logging.getLogger("mass.anonymize")


@dataclass(frozen=True)
class AuditPlan:
    """What the gate audits, decided before any work (see :func:`_audit_plan`)."""

    suppress: tuple[str, ...]
    preserve: tuple[str, ...]
    watch: tuple[str, ...]  # --watch, else the policy's audit.watch (mass.audit.unnamed)
    labels: str | None  # None: the input's own label columns
    policy: object  # mass.audit.AuditPolicy (imported lazily: GX is heavy)
    policy_source: str
    report: str


def report_path(args) -> str:
    return args.report or f"{fs.normpath(args.output)}_report"


def resolve_policy(path: str | None) -> tuple[object, str]:
    """(policy, where it came from): --policy, else ./params.yaml if present, else defaults."""
    from mass.audit.policy import AuditPolicy, load_policy

    if path is None and os.path.isfile("params.yaml"):
        path = "params.yaml"
    if path is None:
        return AuditPolicy(), "built-in defaults (no --policy, no ./params.yaml)"
    return load_policy(path), f"{path} (audit:)"


def _check_allowed(args, checked: CheckedInput) -> None:
    """With the gate's labels at hand, judge each --allow-columns column ALONE against each
    suppressed attribute by the audit's rule, before any inference
    (:mod:`transforms.allow_check`): a proxy is refused unless --force-allow, which records
    it in ``mass.forced_columns``. Without labels (--no-audit) only the name rules apply."""
    if hasattr(args, "_allow_forced"):
        return
    args._allow_forced, args._allow_verdicts = [], []
    plan: AuditPlan | None = args._plan
    if plan is None or not args.allow_columns:
        return
    from transforms.allow_check import check_allow_columns

    forced, verdicts = check_allow_columns(
        input_files=list(checked.files), labels=plan.labels, id_col=args.id_col,
        columns=list(args.allow_columns), suppress=list(plan.suppress),
        preserve=list(plan.preserve), policy=plan.policy, force=args.force_allow,
    )  # fmt: skip
    args._allow_forced, args._allow_verdicts = forced, verdicts
    if verdicts:
        rows = verdicts[0].rows
        print(f"anonymize: --allow-columns judged alone against {list(plan.suppress)} on "
              f"{rows} labelled rows: " + (f"FORCED {forced}" if forced else "none predicts "
              "a suppressed attribute above the policy"), flush=True)  # fmt: skip


def _audit_plan(args, info: dict, schema: pa.Schema) -> AuditPlan | None:
    """Decide the gate before any data moves: labels at hand -> audit; none -> refuse
    unless --no-audit (the release is then recorded as unaudited)."""
    suppress = tuple(info.get("suppress") or ())
    preserve = tuple(info.get("preserve") or ())
    if args.no_audit:
        log.warning("--no-audit: publishing without an audit; the release records audited: "
                    "false (mass.audited, _release.json)")  # fmt: skip
        return None
    model = info.get("name") or args.model
    if not suppress:
        raise ConfigError(
            f"model '{model}' names no suppressed attribute (export.json 'suppress'), so "
            "its release cannot be audited; pass --no-audit to publish it unaudited (recorded)"
        )
    policy, source = args._policy
    from mass.audit.unnamed import check_watch, effective_watch

    if args.labels:
        first = expand_paths(args.labels)[0]
        try:
            names = pq.read_schema(first).names
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableInputError(
                f"--labels {first}: not readable as Parquet ({e}); pass the held-out labels file"
            ) from e
        where = f"--labels {args.labels}"
    else:
        names, where = schema.names, f"--input {args.input}"
    watch = effective_watch(getattr(args, "watch", None), policy.watch, names, where=where)
    check_watch(watch, suppress, preserve)
    wanted = list(dict.fromkeys([*suppress, *preserve, *watch]))
    missing = [a for a in wanted if a not in names] + (
        [args.id_col] if args.id_col not in names else []
    )
    if missing:
        raise ConfigError(
            f"{where}: no column(s) {missing} for the audit of model '{model}' (suppress "
            f"{list(suppress)}, preserve {list(preserve)}, watch {list(watch)}); the release is audited before "
            "publication: pass --labels LABELS (id + those columns), or --no-audit to publish "
            "it unaudited (recorded in the release metadata)"
        )
    # printed like the summary line: the root logger is at WARNING until Beam's run starts
    print(f"anonymize: audit gate on: labels from {args.labels or f'the input columns {wanted}'}"
          f"; policy from {source}; report to {report_path(args)}", flush=True)  # fmt: skip
    return AuditPlan(suppress=suppress, preserve=preserve, watch=watch, labels=args.labels,
                     policy=policy,
                     policy_source=source, report=report_path(args))  # fmt: skip


def _audit_staged(args, plan: AuditPlan, staged: str, q_ids: pa.Array | None) -> dict:
    """The gate: audit the staged release; raise :class:`AuditFailedError` (the report is
    written either way) so that nothing is published unless it passes."""
    from mass.audit import AuditRequest
    from mass.audit.into import audit_into

    attrs = list(dict.fromkeys([*plan.suppress, *plan.preserve, *plan.watch]))
    labels, original = plan.labels, None
    if labels is None:  # the input's own label columns (and its embeddings as the original)
        labels = args.input
        if q_ids is not None:
            labels = _valid_rows(args, [args.id_col, args.emb_col, *attrs], q_ids)
    else:
        original = args.input
        if q_ids is not None:
            original = _valid_rows(args, [args.id_col, args.emb_col], q_ids)
    req = AuditRequest(
        release=staged, labels=labels, suppress=plan.suppress, preserve=plan.preserve,
        watch=plan.watch, policy=plan.policy, report_dir=plan.report, run_dir=args.run_dir, input=original,
        id_col=args.id_col, emb_col=args.emb_col, allow=tuple(args.allow_columns),
    )  # fmt: skip
    _, metrics = audit_into(req, plan.report)  # local or object store
    path = fs.join(plan.report, "audit.json")
    if not metrics.get("pass"):
        raise AuditFailedError(
            f"{args.output}: the staged release failed its audit ({_failures(metrics)}); "
            f"report: {plan.report}; nothing published (a previous release at "
            f"{args.output} is kept)"
        )
    log.info("audit passed: %s", path)
    return {"verdict": "pass", "report": path, "policy": plan.policy_source}


def _failures(metrics: dict) -> str:
    """``attribute 'digit' (suppressed: worst 0.91, limit 0.16), ...`` + other expectations."""
    parts = []
    for name, row in (metrics.get("attributes") or {}).items():
        if row.get("pass"):
            continue
        nums = [f"worst {row['worst']:.3f}"] if isinstance(row.get("worst"), float) else []
        for what, key, lim in (("", "ci_high", "limit"),
                               ("balanced ", "balanced_ci_high", "balanced_limit")):
            bounds = [v for v in (row.get(key) or {}).values() if isinstance(v, float)]
            if row.get("role") == "suppressed" and bounds:  # the rule judges upper bounds
                limit = row.get(lim)
                nums.append(f"highest {what}95% upper bound {max(bounds):.3f}"
                            + (f" vs limit {limit:.3f}" if isinstance(limit, float) else ""))
        if row.get("role") != "suppressed" and isinstance(row.get("limit"), float):
            nums.append(f"limit {row['limit']:.3f}")
        parts.append(f"attribute '{name}' ({row.get('role')}{': ' if nums else ''}"
                     f"{', '.join(nums)})")  # fmt: skip
    names = [f"'{n}'" for n, r in (metrics.get("attributes") or {}).items() if not r.get("pass")]
    other = [e for e in metrics.get("failed_expectations") or []
             if not any(n in e for n in names)]  # fmt: skip
    if other:
        more = " other" if parts else ""
        parts.append(f"{len(other)}{more} failed expectation(s), first: {other[0]}")
    return "; ".join(parts) or "no passing verdict in audit.json"


def _valid_rows(args, columns: list[str], q_ids: pa.Array) -> str:
    """The input's ``columns`` without the quarantined rows, as a private Parquet file for the
    audit (its readers refuse the NaN/ragged rows the job quarantined)."""
    table = read_table(args.input, columns=columns)
    keep = pc.invert(pc.is_in(table.column(args.id_col), value_set=q_ids))
    n = len(fs.listdir(args._aux)) if fs.isdir(args._aux) else 0
    path = fs.join(args._aux, f"valid-{n}.parquet")
    with fs.atomic_output(path) as f:
        pq.write_table(table.filter(keep), f)
    return path
