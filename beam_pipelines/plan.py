"""The anonymize job's flags and its frozen plan, built and checked once at the entry point
from the parsed flags and Beam options; the pipeline, the gate and the preflight read it,
nothing writes to the parsed flags (`mass extract`'s plan:
:class:`beam_pipelines.extract.ExtractJob`). A new flag: its line in :func:`add_arguments`,
one field of :class:`AnonymizeJob` and its line in :func:`plan_anonymize` (checks included),
then read ``job.<field>`` where it is used.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from beam_pipelines.options import (
    Serving,
    add_serving_arguments,
    names_runner,
    plan_serving,
    temp_location,
)
from mass import fs
from mass.errors import ConfigError
from mass.keys import NOISE_KEY_ENV, STATE_ENV, OwnerKey, resolve_key, state_dir
from mass.names import add_column_arguments, split_names
from mass.pseudonym import SCOPES
from mass.release.commit import private_dir, scratch_root, staging_dir
from mass.release.ownership import check_outputs, lies_inside
from mass.release.writable import probe_writable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `mass anonymize` (the job: :mod:`beam_pipelines.anonymize`)."""
    parser.add_argument("--input", required=True, help="embedding Parquet file, dir or glob")
    parser.add_argument("--output", required=True, help="release directory (replaced atomically)")
    parser.add_argument("--model", required=True, help="modifier name in the Triton repository")
    add_column_arguments(parser)
    parser.add_argument(
        "--allow-columns",
        type=split_names,
        default=[],
        help="comma-separated extra columns to release. Refused by name: a suppressed label, "
        "raw media. With the audit's labels (the gate is on), each column is also judged "
        "alone against each suppressed attribute by the audit's attackers and limits before "
        "any inference, and a column that predicts one above the policy is refused; without "
        "labels (--no-audit) only the name rules apply",
    )
    parser.add_argument(
        "--force-allow",
        action="store_true",
        help="release refused allow-listed columns anyway, recorded in the release metadata "
        "(mass.forced_columns); the audit of the staged release still judges every released "
        "column, so a real proxy still fails the gate",
    )
    parser.add_argument(
        "--max-quarantined",
        type=int,
        default=0,
        help="fail without publishing when more rows are quarantined",
    )
    parser.add_argument("--quarantine", default=None, help="quarantine dir (OUT_quarantine)")
    g = parser.add_argument_group("audit gate (runs on the staged release before publication)")
    g.add_argument(
        "--labels",
        default=None,
        help="Parquet with id + the model's suppress/preserve label columns (default: the "
        "input's own label columns)",
    )
    g.add_argument(
        "--policy",
        default=None,
        help="params.yaml whose audit: section is the policy (default: ./params.yaml if "
        "present, else the built-in defaults)",
    )
    g.add_argument("--report", default=None, help="audit report directory (OUT_report)")
    g.add_argument(
        "--watch",
        default=None,
        type=split_names,
        help="label columns neither suppressed nor preserved whose retention the audit "
        "reports (and gates with audit.watch_min_kept), w[,...]; default: the policy's "
        "audit.watch",
    )
    g.add_argument("--run-dir", default=None, help="training run: frozen branch judges")
    g.add_argument(
        "--no-audit",
        action="store_true",
        help="publish without an audit (recorded as unaudited in the release metadata)",
    )
    parser.add_argument(
        "--noise-key-file",
        default=None,
        help=f"owner key (`mass keygen`) that seeds the release noise; default ${NOISE_KEY_ENV}; "
        "required for a stochastic modifier (docs/threat-model.md)",
    )
    parser.add_argument(
        "--pseudonymize-ids",
        action="store_true",
        help="release keyed pseudonyms instead of the ids: HMAC-SHA256 of each id under a "
        "sub-key of the owner key (--noise-key-file / $MASS_NOISE_KEY_FILE), 32 hex digits; "
        "only the key holder can map them back (by pseudonymizing their own ids); recorded "
        "in the release metadata (mass.ids), never the key",
    )
    parser.add_argument(
        "--pseudonym-scope",
        choices=SCOPES,
        default=None,
        help="with --pseudonymize-ids: 'stable' (default) gives an id the same pseudonym in "
        "every release under the key, so releases join on their ids; 'model' one per model "
        "name; 'release' fresh pseudonyms for this release only, the owner's (id, pseudonym) "
        "map kept privately in $MASS_STATE_DIR/pseudonym-maps/ (docs/threat-model.md)",
    )
    parser.add_argument(
        "--noise-key-on-worker",
        action="store_true",
        help="workers read --noise-key-file themselves (same path on every worker) instead of "
        "receiving the noise subkey inside the pickled job",
    )
    add_serving_arguments(parser)


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
    """This run's private directories (named per run; removed by the job however it ends).

    A release on local disk is staged beside --output (mode 0700) and swapped into place. One
    on an object store is staged in private scratch (:func:`mass.release.commit.scratch_root`:
    below --temp_location, else this machine's temp directory) and copied under the release
    prefix only when its audit has passed, so nothing raw (the pseudonymized input copy,
    spills, filtered labels) and nothing unaudited is ever readable where the release is."""

    stage: str  # the staged release
    q_stage: str  # the staged quarantine
    aux: str  # the audit's filtered labels, the pseudonymized input copy
    spills: str  # the workers' spills: in the scratch when there is one, else the stage
    scratch: str | None = None  # the private scratch root (removed whole), if any

    @classmethod
    def of(cls, job: AnonymizeJob) -> Staging:
        remote_out, remote_q = fs.is_remote(job.output), fs.is_remote(job.quarantine)
        root = None
        if remote_out or remote_q or job.temp_location:
            root = scratch_root(job.temp_location)
        if remote_out:
            stage, aux = fs.join(root, "release"), fs.join(root, "aux")
        else:
            stage, aux = staging_dir(job.output), staging_dir(job.output)
        q_stage = fs.join(root, "quarantine") if remote_q else staging_dir(job.quarantine)
        spills = fs.join(root, "spills") if root else stage
        return cls(stage=stage, q_stage=q_stage, aux=aux, spills=spills, scratch=root)

    def dirs(self) -> list[str]:
        named = (self.stage, self.q_stage, self.aux, self.spills, self.scratch)
        return list(dict.fromkeys(d for d in named if d))

    def create_private(self) -> None:
        """Create the staged release, quarantine and spill directories mode 0700 before
        anything is written into them (the spills keep each row's input embedding, for the
        bypass check). ``aux`` is made private where it is first used, and only then (it is
        needed only when rows were dropped or ids pseudonymized). Publication gives a release
        or quarantine directory the umask's mode (mass.release.commit)."""
        for d in dict.fromkeys((self.stage, self.q_stage, self.spills)):
            private_dir(d)


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
    temp = temp_location(beam_args)
    check_outputs(output=args.output, quarantine=quarantine, inputs=args.input, report=report,
                  temp=temp)  # fmt: skip
    if (fs.is_remote(out) or fs.is_remote(quarantine)) and temp is None and names_runner(beam_args):
        raise ConfigError(
            f"--output {args.output}: a release on an object store is staged in private "
            "scratch and copied under its prefix only once its audit passes; with --runner "
            "the workers cannot reach this machine's scratch: pass --temp_location=PATH, a "
            "prefix every worker can reach and the release's readers cannot (not under "
            "--output, --quarantine or --report); nothing was read or published"
        )
    probe_writable("--output", args.output, into=False)  # can, not only may (mass.release.writable)
    probe_writable("--quarantine", quarantine, into=False)
    if report is not None:
        probe_writable("--report", report, into=True)
    if args.no_audit and (args.labels or args.policy or args.report or args.run_dir
                          or args.watch):  # fmt: skip
        raise ConfigError("--no-audit: drop --labels/--policy/--report/--run-dir/--watch, or drop "
                          "--no-audit to audit before publishing")  # fmt: skip
    policy, source = None, ""
    if not args.no_audit:  # the audit's modules (GX, the attackers) load only for an audited job
        from mass.audit.policy import resolve_policy

        policy, source = resolve_policy(args.policy)
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
            if path and not fs.is_remote(path) and lies_inside(private, path):
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
        temp_location=temp,
    )
