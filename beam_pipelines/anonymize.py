"""Beam job: embeddings Parquet -> Triton modifier -> privatized release Parquet (fail-closed).

    mass anonymize --input IN --output OUT --model NAME [--repository DIR]
        [--triton-url HOST:PORT] [--id-col id --emb-col emb] [--allow-columns a,b [--force-allow]]
        [--labels LABELS] [--policy params.yaml] [--report OUT_report] [--run-dir RUN]
        [--no-audit] [--batch-rows 4096] [--shards N] [--max-quarantined 0] [beam flags]
        [--noise-key-file PATH (or env MASS_NOISE_KEY_FILE) [--noise-key-on-worker]]

Steps: decide that OUT and OUT_quarantine may be replaced (only our own marked directories,
never the input; :func:`transforms.release.check_outputs`); check the server/model, the input
schema and the audit's labels before reading data; with labels, judge each --allow-columns
column alone against the suppressed attributes on a sample (:mod:`transforms.allow_check`,
a proxy is refused unless --force-allow); then one DoFn per input row group reads
Arrow batches, quarantines bad rows, modifies the rest on Triton and spills id-sorted runs
(:mod:`transforms.modify`); one merge per shard writes the staged part files; verify the
invariants, audit the STAGED release (the gate: a failing audit publishes nothing), write the
``_release.json`` marker + manifest and rename into OUT (see :mod:`transforms.release`).

The gate runs whenever labels for the model's attributes (export.json suppress + preserve)
are at hand: as columns of the input, or in ``--labels``. Policy: ``--policy``, else the
``audit:`` section of ./params.yaml when that file exists, else the built-in defaults. The
report (audit.json, data_docs/, privacy_utility.png) goes to ``--report``, default
``OUT_report`` next to OUT, and is written whether the audit passes or fails. Without labels
the job refuses unless ``--no-audit``, which publishes the release recorded as unaudited
(``mass.audited`` = "false" in the Parquet metadata, ``audited: false`` in _release.json).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import apache_beam as beam
import pyarrow as pa

from beam_pipelines.gate import (  # noqa: F401  (split out; these names stay importable here)
    AuditPlan,
    _audit_plan,
    _audit_staged,
    _check_allowed,
    _failures,
    _valid_rows,
    report_path,
    resolve_policy,
)
from beam_pipelines.options import (
    add_serving_arguments,
    check_common,
    counter,
    csv_list,
    pipeline_for,
    run_to_completion,
    shm_mode,
    triton_endpoint,
)
from beam_pipelines.preflight import check_job_input, check_noise_key, keyed_seeds
from mass import fs
from mass.errors import (
    ConfigError,
    InputError,
    QuarantineThresholdError,
    SchemaError,
)
from mass.io import read_table
from mass.keys import NOISE_KEY_ENV, resolve_key
from mass.pseudonym import DESCRIPTION as PSEUDONYMOUS
from mass.serving.contract import export_info, server_info
from mass.serving.manifest import verify_version_dir
from transforms.inference.tensors import ModifierInputs
from transforms.inference.triton import TritonModelHandler
from transforms.modify import ModifyRowGroupFn, pick
from transforms.parquet_io import plan_row_groups
from transforms.parquet_write import MergeShards, WriteShardedParquet
from transforms.quarantine import publish_quarantine, quarantine_schema
from transforms.release import (
    check_outputs,
    discard_staging,
    publish_release,
    recover_output,
    release_metadata,
    resolve_allow_columns,
    staging_dir,
)
from transforms.validate import CheckedInput, release_schema

log = logging.getLogger("mass.anonymize")
INPUT_COPY = "__mass_input"  # the model's input, carried to the writer for the bypass check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="embedding Parquet file, dir or glob")
    parser.add_argument("--output", required=True, help="release directory (replaced atomically)")
    parser.add_argument("--model", required=True, help="modifier name in the Triton repository")
    parser.add_argument("--id-col", default="id", help="row id column (int64, unique; what keyed noise and joins use)")
    parser.add_argument("--emb-col", default="emb", help="embedding column (fixed-size list of float32)")
    parser.add_argument(
        "--allow-columns",
        type=csv_list,
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
        "--noise-key-on-worker",
        action="store_true",
        help="workers read --noise-key-file themselves (same path on every worker) instead of "
        "receiving the noise subkey inside the pickled job",
    )
    add_serving_arguments(parser)


def run(
    argv: list[str] | None = None,
    test_pipeline: beam.Pipeline | None = None,
    *,
    model_handler=None,
    model_info: dict | None = None,
) -> dict:
    """Parse ``argv`` (unknown flags go to Beam) and run the job; returns the summary.

    ``model_handler``/``model_info`` swap the Triton call for another handler (e.g. an
    in-process :class:`transforms.inference.function.FunctionModelHandler`) and its provenance.
    """
    parser = argparse.ArgumentParser(prog="anonymize")
    add_arguments(parser)
    args, extra = parser.parse_known_args(argv)
    return run_job(
        args, extra, test_pipeline=test_pipeline, model_handler=model_handler, model_info=model_info
    )


def quarantine_path(args) -> str:
    return args.quarantine or f"{fs.normpath(args.output)}_quarantine"


def runs_root(args, extra: list[str]) -> str:
    """Where workers spill sorted runs: Beam's ``--temp_location`` when given (a job folder
    below it), else the release's staging location (beside the output, in the same store)."""
    temp = None
    for i, a in enumerate(extra):
        if a.startswith("--temp_location="):
            temp = a.split("=", 1)[1]
        elif a == "--temp_location" and i + 1 < len(extra):
            temp = extra[i + 1]
    if not temp:
        return args._stage
    return fs.join(temp, f"mass-runs-{fs.basename(args._stage)}")


def run_job(args, extra, *, test_pipeline=None, model_handler=None, model_info=None) -> dict:
    check_common(args)
    if args.max_quarantined < 0:
        raise ConfigError(f"--max-quarantined must be >= 0, got {args.max_quarantined}")
    q_out = quarantine_path(args)
    # Before any work: which paths the job may replace (only its own outputs, never the input).
    check_outputs(output=args.output, quarantine=q_out, inputs=args.input,
                  report=None if args.no_audit else report_path(args))  # fmt: skip
    if args.no_audit and (args.labels or args.policy or args.report or args.run_dir):
        raise ConfigError("--no-audit: drop --labels/--policy/--report/--run-dir, or drop "
                          "--no-audit to audit before publishing")  # fmt: skip
    args._policy = None if args.no_audit else resolve_policy(args.policy)
    args._noise_key = resolve_key(getattr(args, "noise_key_file", None), NOISE_KEY_ENV)
    if getattr(args, "pseudonymize_ids", False) and args._noise_key is None:
        raise ConfigError(
            "--pseudonymize-ids: the pseudonyms are keyed by the owner key: pass "
            f"--noise-key-file PATH or set {NOISE_KEY_ENV} (create one with `mass keygen "
            "PATH`); nothing was read or published"
        )
    removed = recover_output(args.output) + recover_output(q_out)
    if removed:
        log.warning("cleared leftovers of a killed run: %s", removed)
    args._stage, args._q_stage = staging_dir(args.output), staging_dir(q_out)
    args._aux = staging_dir(args.output)  # the audit's filtered labels, when rows were dropped
    args._runs = runs_root(args, extra)
    names: dict[str, str] = {}
    try:
        if getattr(args, "pseudonymize_ids", False):  # the whole job runs on a private copy
            names = _pseudonymize_inputs(args)
        return _run_checked(args, extra, test_pipeline, model_handler, model_info)
    except InputError as e:
        if not names:
            raise
        from transforms.pseudonymize import unmask

        raise type(e)(unmask(str(e), names)) from e
    finally:
        for d in dict.fromkeys((args._stage, args._q_stage, args._aux, args._runs)):
            discard_staging(d)  # never a version this run committed (object stores)


def _pseudonymize_inputs(args) -> dict[str, str]:
    """Point --input (and --labels) at copies in the job's private staging whose ids are the
    owner-keyed pseudonyms (:mod:`transforms.pseudonymize`); removed with the staging."""
    from transforms.pseudonymize import pseudonymized_copy

    kw = dict(id_col=args.id_col, key=args._noise_key)
    where = fs.join(args._aux, "ids")
    args.input, names = pseudonymized_copy(args.input, where, tag="input", **kw)
    if args.labels:
        args.labels, more = pseudonymized_copy(args.labels, where, tag="labels", **kw)
        names.update(more)
    return names


def _run_checked(args, extra, test_pipeline, model_handler, model_info) -> dict:
    # Everything decidable without the server is checked before one is started or contacted.
    local = model_handler is None and os.path.isdir(os.path.join(args.repository, args.model))
    info = model_info or {}
    if local:
        info = export_info(args.repository, args.model, args.model_version or None)
        # The weights must still be the exported ones (the server checks again when loading).
        verify_version_dir(os.path.join(args.repository, args.model, str(info["version"])))
    check_noise_key(args, info if local or model_handler is not None else {})
    args._seeds = keyed_seeds(args, info)
    checked = check_job_input(args, info)
    if model_handler is not None:
        handler = model_handler.with_row_seeds(args._seeds)
        return _run(args, extra, test_pipeline, handler, info, None, checked)
    expected_sha = info.get("sha256") if local else None
    with triton_endpoint(args, model=args.model, expected_sha256=expected_sha) as url:
        if not local:
            info = server_info(url, args.model, args.model_version)
            checked = check_job_input(args, info, checked)
            args._seeds = keyed_seeds(args, info)
        handler = TritonModelHandler(
            url,
            args.model,
            version=args.model_version,
            inputs=ModifierInputs(id_col=args.id_col, emb_col=args.emb_col, seeds=args._seeds),
            output_col=args.emb_col,
            output_dim=int(info["dim"]) if info.get("dim") else None,
            keep_input_as=INPUT_COPY,
            timeout_s=args.timeout_s,
            max_retries=args.max_retries,
            shared_memory=shm_mode(args),
        )
        return _run(args, extra, test_pipeline, handler, info, url, checked)


def _run(args, extra, test_pipeline, handler, info: dict, url, checked: CheckedInput) -> dict:
    t0 = time.monotonic()
    schema = checked.schema
    dim = int(info.get("dim") or handler._output_dim or _dim_of(schema, args.emb_col))
    forced = resolve_allow_columns(
        args.allow_columns,
        schema=schema,
        suppress=list(info.get("suppress", [])),
        id_col=args.id_col,
        emb_col=args.emb_col,
        force=args.force_allow,
    )
    if not hasattr(args, "_plan"):  # no provenance was checked (an in-process handler)
        args._plan = _audit_plan(args, info, schema)
    _check_allowed(args, checked)
    forced += [c for c in args._allow_forced if c not in forced]
    plan: AuditPlan | None = args._plan
    fingerprint = args._seeds.fingerprint if args._seeds else ""
    meta = release_metadata(
        info, forced_columns=forced, audited=plan is not None, noise_key_fingerprint=fingerprint,
        ids=PSEUDONYMOUS if getattr(args, "pseudonymize_ids", False) else "",
    )  # fmt: skip
    out_schema = release_schema(schema, id_col=args.id_col, emb_col=args.emb_col, dim=dim,
                                columns=args.allow_columns, metadata=meta)  # fmt: skip
    q_out = quarantine_path(args)
    q_schema = quarantine_schema(schema.field(args.id_col).type, args.id_col)
    stage, q_stage = args._stage, args._q_stage

    p = pipeline_for(extra, test_pipeline)
    modify = ModifyRowGroupFn(
        handler,
        stage=args._runs,  # the spiller's runs go below it (reachable by every worker)
        columns=[args.id_col, args.emb_col, *args.allow_columns],
        batch_rows=args.batch_rows,
        id_col=args.id_col,
        emb_col=args.emb_col,
        dim=dim,
        num_shards=args.shards,
        verify_col=INPUT_COPY,
        progress_every=args.progress_every,
    )
    tagged = (
        p
        | "RowGroups" >> beam.Create(plan_row_groups(checked.files))
        | "ReadModifySpill" >> beam.ParDo(modify)
    )
    quarantined = (
        tagged
        | "Quarantined" >> beam.FlatMap(pick, "bad")
        | "WriteQuarantine"
        >> WriteShardedParquet(q_stage, id_col=args.id_col, num_shards=1, schema=q_schema,
                               runs=args._runs)  # fmt: skip
    )
    released = (
        tagged
        | "Runs" >> beam.FlatMap(pick, "run")
        | "WriteRelease"
        >> MergeShards(
            stage,
            id_col=args.id_col,
            num_shards=args.shards,
            schema=out_schema,
            verify_col=INPUT_COPY,
            runs=args._runs,
        )
    )
    # DaskRunner computes only the graph of the last transform: join both sinks into it.
    _ = (quarantined, released) | "Done" >> beam.Flatten()
    # staging directories are removed by run_job whatever happens
    result = run_to_completion(p)
    q_doc = publish_quarantine(q_stage, q_out, schema=q_schema)
    n_bad = q_doc["rows"]
    if n_bad > args.max_quarantined:
        raise QuarantineThresholdError(
            f"{args.input}: {n_bad} rows quarantined (see {q_out}), more than "
            f"--max-quarantined {args.max_quarantined}: column '{args.emb_col}' "
            f"{_first_quarantined(q_out, args.id_col)}; fix the input or raise the "
            "threshold; nothing published"
        )
    q_ids = None
    if n_bad:
        q_ids = read_table(q_out, columns=[args.id_col]).column(args.id_col).combine_chunks()
    verdict: dict = {}

    def gate(staged: str) -> dict | None:
        if plan is None:
            return None
        verdict.update(_audit_staged(args, plan, staged, q_ids))
        return verdict

    rows_out = publish_release(
        stage,
        args.output,
        expected_ids=checked.index,
        quarantined=q_ids,
        id_col=args.id_col,
        emb_col=args.emb_col,
        allow_columns=args.allow_columns,
        num_shards=args.shards,
        schema=out_schema,
        gate=gate,
        manifest=True,
        # no path: the release's bytes do not depend on where it (or OUT_quarantine) lives
        quarantine={"rows": n_bad, "sha256": [p["sha256"] for p in q_doc["parts"]]},
    )
    secs = time.monotonic() - t0
    summary = {
        "rows_in": checked.rows,
        "rows_out": rows_out,
        "quarantined": n_bad,
        "retries": counter(result, "retries"),
        "seconds": round(secs, 3),
        "rows_per_s": round(checked.rows / max(secs, 1e-9), 1),
        "output": args.output,
        "quarantine": q_out,
        "model": info.get("name"),
        "model_version": info.get("version"),
        "forced_columns": forced,
        "allow_check": [v.to_dict() for v in args._allow_verdicts],
        "audited": plan is not None,
        "audit_report": verdict.get("report"),
        "noise_key_fingerprint": fingerprint,
    }
    print(
        f"anonymize: {summary['rows_in']} rows in, {rows_out} out, {n_bad} quarantined, "
        f"{summary['retries']} retries, {secs:.1f} s, {summary['rows_per_s']:.0f} rows/s, "
        + (f"audit passed (report {verdict['report']})" if plan else "UNAUDITED (--no-audit)")
    )
    log.info("summary %s", json.dumps(summary))
    return summary


def _first_quarantined(q_out: str, id_col: str, n: int = 5) -> str:
    """``id 3 (non-finite), id 7 (zero-vector), ...`` for the error message."""
    table = read_table(q_out).sort_by(id_col).slice(0, n)
    pairs = zip(table.column(id_col).to_pylist(), table.column("reason").to_pylist(), strict=True)
    return ", ".join(f"{id_col} {i!r} ({why})" for i, why in pairs)


def _dim_of(schema: pa.Schema, col: str) -> int:
    typ = schema.field(col).type
    if pa.types.is_fixed_size_list(typ):
        return typ.list_size
    raise SchemaError(
        f"column '{col}' is {typ}; the model's dimension is unknown, pass a "
        "repository with export.json"
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    run()
