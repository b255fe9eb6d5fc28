"""The frozen plan of the anonymize job, built and checked once at the entry point from the
parsed flags and Beam options; the pipeline, the gate and the preflight read it, nothing
writes to the parsed flags (`mass extract`'s plan: :class:`beam_pipelines.extract.ExtractJob`). A new flag: add it to the command's ``add_arguments``, one field here and
its line in ``plan_*`` (checks included), then read ``job.<field>`` where it is used.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass

from beam_pipelines.options import Serving, plan_serving, temp_location
from mass import fs
from mass.errors import ConfigError
from mass.keys import NOISE_KEY_ENV, STATE_ENV, OwnerKey, resolve_key, state_dir
from mass.release.commit import check_outputs, private_dir, staging_dir
from mass.release.writable import probe_writable


def resolve_policy(path: str | None) -> tuple[object, str]:
    """(policy, where it came from): --policy, else ./params.yaml if present, else defaults."""
    from mass.audit.policy import AuditPolicy, load_policy

    if path is None and os.path.isfile("params.yaml"):
        path = "params.yaml"
    if path is None:
        return AuditPolicy(), "built-in defaults (no --policy, no ./params.yaml)"
    return load_policy(path), f"{path} (audit:)"


@dataclass(frozen=True)
class AnonymizeJob:
    """Every setting of `mass anonymize` (see :mod:`beam_pipelines.anonymize`)."""

    input: str
    output: str
    quarantine: str  # --quarantine, else OUT_quarantine
    model: str
    id_col: str
    emb_col: str
    allow_columns: tuple[str, ...]
    force_allow: bool
    max_quarantined: int
    audit: bool  # False: --no-audit (the release records audited: false)
    labels: str | None  # None: the input's own label columns
    watch: tuple[str, ...]  # --watch (else the policy's audit.watch, read by the gate)
    pseudonymize_ids: bool  # --pseudonymize-ids: ids released as keyed pseudonyms
    report: str | None  # --report, else OUT_report; None without the audit
    run_dir: str | None
    policy: object | None  # mass.audit.AuditPolicy; None without the audit
    policy_source: str
    noise_key: OwnerKey | None  # --noise-key-file, else $MASS_NOISE_KEY_FILE
    noise_key_on_worker: bool
    serving: Serving
    beam_args: tuple[str, ...]  # checked by beam_pipelines.options.beam_flags
    temp_location: str | None  # Beam's --temp_location, as Beam parses it
    pseudonym_scope: str = "stable"  # --pseudonym-scope (mass.pseudonym.SCOPES)
    pseudonym_map: str = ""  # the owner's private (id, pseudonym) map of a per-release scope


@dataclass(frozen=True)
class Staging:
    """This run's private directories (named per run; removed by the job however it ends)."""

    stage: str  # the staged release
    q_stage: str  # the staged quarantine
    aux: str  # the audit's filtered labels, when rows were dropped
    spills: str  # the workers' spills: below --temp_location when given, else the stage

    @classmethod
    def of(cls, job: AnonymizeJob) -> Staging:
        stage, aux = staging_dir(job.output), staging_dir(job.output)
        spills = stage
        if job.temp_location:
            spills = fs.join(job.temp_location, f"mass-spills-{fs.basename(stage)}")
        return cls(stage=stage, q_stage=staging_dir(job.quarantine), aux=aux, spills=spills)

    def dirs(self) -> list[str]:
        return list(dict.fromkeys((self.stage, self.q_stage, self.aux, self.spills)))

    def create_private(self) -> None:
        """Create the staged release, quarantine and spill directories mode 0700 before
        anything is written into them (the spills keep each row's input embedding, for the
        bypass check). ``aux`` is made private where it is first used, and only then (it is
        needed only when rows were dropped or ids pseudonymized). Publication gives a release
        or quarantine directory the umask's mode (mass.release.commit)."""
        for d in dict.fromkeys((self.stage, self.q_stage, self.spills)):
            private_dir(d)


def _under(path: str, root: str) -> bool:
    a, b = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([a, b]) == b


def plan_anonymize(args: argparse.Namespace, beam_args: Sequence[str] = ()) -> AnonymizeJob:
    """The job's plan; every check decidable from the flags and the files they name runs
    here, before any data is read or a server is started."""
    serving = plan_serving(args)
    if args.max_quarantined < 0:
        raise ConfigError(f"--max-quarantined must be >= 0, got {args.max_quarantined}")
    out = fs.normpath(args.output)
    quarantine = args.quarantine or f"{out}_quarantine"
    report = None if args.no_audit else args.report or f"{out}_report"
    # Before any work: which paths the job may replace (only its own outputs, never the input).
    check_outputs(output=args.output, quarantine=quarantine, inputs=args.input, report=report)
    probe_writable("--output", args.output, into=False)  # can, not only may (mass.release.writable)
    probe_writable("--quarantine", quarantine, into=False)
    if report is not None:
        probe_writable("--report", report, into=True)
    if args.no_audit and (args.labels or args.policy or args.report or args.run_dir
                          or args.watch):  # fmt: skip
        raise ConfigError("--no-audit: drop --labels/--policy/--report/--run-dir/--watch, or drop "
                          "--no-audit to audit before publishing")  # fmt: skip
    policy, source = (None, "") if args.no_audit else resolve_policy(args.policy)
    noise_key = resolve_key(args.noise_key_file, NOISE_KEY_ENV)
    if args.pseudonymize_ids and noise_key is None:
        raise ConfigError(
            "--pseudonymize-ids: the pseudonyms are keyed by the owner key: pass "
            f"--noise-key-file PATH or set {NOISE_KEY_ENV} (create one with `mass keygen "
            "PATH`); nothing was read or published"
        )
    scope = getattr(args, "pseudonym_scope", None)
    if scope and not args.pseudonymize_ids:
        raise ConfigError(f"--pseudonym-scope {scope}: pseudonyms are made only with "
                          "--pseudonymize-ids; add it, or drop --pseudonym-scope")  # fmt: skip
    if scope == "release":  # the owner's map is written there, never under a release prefix
        private = state_dir()
        for flag, path in (("--output", out), ("--quarantine", quarantine), ("--report", report)):
            if path and not fs.is_remote(path) and _under(private, path):
                raise ConfigError(f"${STATE_ENV} {private}: lies under {flag} {path}; the "
                                  "owner's pseudonym map must stay private: move one of them")  # fmt: skip
        probe_writable(f"--pseudonym-scope release (${STATE_ENV})", private, into=True)
    return AnonymizeJob(
        input=args.input,
        output=args.output,
        quarantine=quarantine,
        model=args.model,
        id_col=args.id_col,
        emb_col=args.emb_col,
        allow_columns=tuple(args.allow_columns),
        force_allow=args.force_allow,
        max_quarantined=args.max_quarantined,
        audit=not args.no_audit,
        labels=args.labels,
        watch=tuple(args.watch or ()),
        pseudonymize_ids=args.pseudonymize_ids,
        pseudonym_scope=scope or "stable",
        report=report,
        run_dir=args.run_dir,
        policy=policy,
        policy_source=source,
        noise_key=noise_key,
        noise_key_on_worker=args.noise_key_on_worker,
        serving=serving,
        beam_args=tuple(beam_args),
        temp_location=temp_location(beam_args),
    )
