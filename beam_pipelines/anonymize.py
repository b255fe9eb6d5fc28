"""Beam job: embeddings Parquet -> Triton modifier -> privatized release Parquet (fail-closed).

    mass anonymize --input IN --output OUT --model NAME [--repository DIR]
        [--triton-url HOST:PORT] [--id-col id --emb-col emb] [--allow-columns a,b [--force-allow]]
        [--labels LABELS] [--policy params.yaml] [--report OUT_report] [--run-dir RUN]
        [--no-audit] [--batch-rows 4096] [--shards N] [--max-quarantined 0] [beam options | -- beam options]
        [--noise-key-file PATH (or env MASS_NOISE_KEY_FILE) [--noise-key-on-worker]]

Steps: decide that OUT and OUT_quarantine may be replaced (only our own marked directories,
never the input; :func:`mass.release.ownership.check_outputs`); check the server/model, the input
schema and the audit's labels before reading data; with labels, judge each --allow-columns
column alone against the suppressed attributes on a sample (:mod:`mass.batches.allow_check`,
a proxy is refused unless --force-allow); then one DoFn per input row group reads
Arrow batches, quarantines bad rows, modifies the rest on Triton and spills id-sorted rows
(:mod:`transforms.modify`); one merge per shard writes the staged part files; verify the
invariants, audit the STAGED release (the gate: a failing audit publishes nothing), write the
``_release.json`` marker + manifest and rename into OUT (see :mod:`mass.release.publish`).

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
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import sys
import time

import apache_beam as beam
import pyarrow as pa

from beam_pipelines.gate import audit_staged, mark_not_published
from beam_pipelines.options import (
    counter,
    parse_job_argv,
    pipeline_for,
    run_to_completion,
    triton_endpoint,
)
from beam_pipelines.plan import AnonymizeJob, Staging, add_arguments, plan_anonymize
from beam_pipelines.preflight import (
    Decided,
    check_export,
    check_job_input,
    check_noise_key,
    decide,
)
from mass import fs
from mass.batches.parquet import plan_row_groups
from mass.batches.quarantine import quarantine_schema
from mass.errors import ConfigError, InputError, QuarantineThresholdError, ReleaseError, SchemaError
from mass.io import read_table
from mass.keys import state_dir
from mass.pseudonym import describe, map_path, scope_label
from mass.release.columns import release_metadata, release_schema
from mass.release.commit import discard_staging, private_dir, recover_output, sweep_scratch
from mass.release.publish import publish_quarantine, publish_release
from mass.report.datasheet import VERBATIM_IDS
from mass.serving.contract import server_info
from mass.serving.tensors import ModifierInputs
from transforms.inference.triton import TritonModelHandler
from transforms.modify import ModifyRowGroupFn, pick
from transforms.parquet_write import MergeShards, WriteShardedParquet

log = logging.getLogger("mass.anonymize")
INPUT_COPY = "__mass_input"  # the model's input, carried to the writer for the bypass check
NEAR_SLACK = 1e-6  # the writer checks rows a little below the audit's max_cosine (rounding)


def run(
    argv: list[str] | None = None,
    test_pipeline: beam.Pipeline | None = None,
    *,
    model_handler=None,
    model_info: dict | None = None,
) -> dict:
    """Parse ``argv`` (Beam options: see :func:`beam_pipelines.options.beam_flags`), plan and
    run the job; returns the summary.

    ``model_handler``/``model_info`` swap the Triton call for another handler (e.g. an
    in-process :class:`transforms.inference.function.FunctionModelHandler`) and its provenance.
    """
    parser = argparse.ArgumentParser(prog="anonymize", allow_abbrev=False)
    add_arguments(parser)
    args, beam_args = parse_job_argv(parser, argv)
    job = plan_anonymize(args, beam_args)
    return run_job(job, test_pipeline=test_pipeline, model_handler=model_handler,
                   model_info=model_info)  # fmt: skip


def run_job(job: AnonymizeJob, *, test_pipeline=None, model_handler=None, model_info=None) -> dict:
    """Run the planned job (:func:`beam_pipelines.plan.plan_anonymize`); its staging
    directories are removed however it ends."""
    removed = (recover_output(job.output) + recover_output(job.quarantine)
               + sweep_scratch(job.temp_location))  # fmt: skip
    if removed:
        log.warning("cleared leftovers of a killed run: %s", removed)
    staging = Staging.of(job)
    names: dict[str, str] = {}
    source = job.input  # the ids a transductive model was fitted on (mass.fitrows)
    try:
        staging.create_private()
        if job.pseudonymize_ids:  # the whole job runs on a private copy
            job, names = _pseudonymize_inputs(job, staging)
        if model_handler is not None:
            summary = _run_in_process(job, staging, test_pipeline, model_handler,
                                      model_info or {}, source)  # fmt: skip
        else:
            summary = _run_served(job, staging, test_pipeline, source)
        if job.pseudonym_map:
            log.info("the owner's pseudonym map (private): %s", job.pseudonym_map)
            summary["pseudonym_map"] = job.pseudonym_map
        return summary
    except (InputError, ConfigError, ReleaseError) as e:  # name the user's files and rows
        if not names:
            raise
        from mass.batches.pseudonymize import unmask

        raise type(e)(unmask(str(e), names, job.id_col)) from e
    finally:
        for d in staging.dirs():
            discard_staging(d)  # never a version this run committed (object stores)
        if job.pseudonym_map and sys.exc_info()[0] is not None:  # nothing was published
            with contextlib.suppress(FileNotFoundError):
                os.remove(job.pseudonym_map)


def _pseudonymize_inputs(job: AnonymizeJob, staging: Staging) -> tuple[AnonymizeJob, dict]:
    """The job on copies (in its private staging) of --input and --labels whose ids are the
    owner-keyed pseudonyms (:mod:`mass.batches.pseudonymize`); removed with the staging."""
    from mass.batches.pseudonymize import pseudonymized_copy

    label = scope_label(job.pseudonym_scope, job.model)
    owner_map = map_path(state_dir(), secrets.token_hex(8)) if label.startswith("release:") else ""
    kw = dict(id_col=job.id_col, key=job.noise_key, label=label)
    where = fs.join(private_dir(staging.aux), "ids")
    inp, names = pseudonymized_copy(job.input, where, tag="input", owner_map=owner_map or None,
                                    **kw)  # fmt: skip
    names[inp] = job.input
    labels = job.labels
    if labels:
        labels, more = pseudonymized_copy(labels, where, tag="labels", **kw)
        names.update({**more, labels: job.labels})
    return dataclasses.replace(job, input=inp, labels=labels, pseudonym_map=owner_map), names


def _ids_note(job: AnonymizeJob) -> str:
    """``mass.ids``: how the released ids were made ("" verbatim)."""
    if not job.pseudonymize_ids:
        return ""
    map_id = os.path.basename(job.pseudonym_map).removesuffix(".parquet")
    return describe(job.pseudonym_scope, job.model, map_id)


def _run_in_process(job, staging, test_pipeline, model_handler, info: dict, source: str) -> dict:
    check_noise_key(job, info)
    checked = check_job_input(job, staging, int(info["dim"]) if info.get("dim") else None)
    decided = decide(job, info, checked, dim_checked=True, source=source)
    # the ROW_SEED is bound to decided.seeds by the per-batch core (transforms.modify)
    return _run(job, staging, test_pipeline, model_handler, decided)


def _run_served(job: AnonymizeJob, staging: Staging, test_pipeline, source: str) -> dict:
    """On Triton: everything decidable without the server is checked before one is started
    or contacted (with the repository's export.json when it is local)."""
    srv = job.serving
    decided = None
    reference = None
    export = check_export(job)  # None: no local export, only a server to ask
    if export is not None:
        info, reference = export
        check_noise_key(job, info)
        checked = check_job_input(job, staging, int(info["dim"]) if info.get("dim") else None)
        decided = decide(job, info, checked, dim_checked=True, source=source)
    else:
        check_noise_key(job, {})
        checked = check_job_input(job, staging, None)
    expected_sha = decided.info.get("sha256") if decided else None
    with triton_endpoint(srv, model=job.model, expected_sha256=expected_sha) as url:
        if decided is None:
            info = server_info(url, job.model, srv.model_version)
            decided = decide(job, info, checked, dim_checked=False, source=source)
        handler = TritonModelHandler(
            url,
            job.model,
            version=srv.model_version,
            inputs=ModifierInputs(id_col=job.id_col, emb_col=job.emb_col, seeds=decided.seeds),
            output_col=job.emb_col,
            output_dim=int(decided.info["dim"]) if decided.info.get("dim") else None,
            keep_input_as=INPUT_COPY,
            timeout_s=srv.timeout_s,
            max_retries=srv.max_retries,
            shared_memory=srv.shared_memory,
        )
        return _run(job, staging, test_pipeline, handler, decided, reference=reference)


def _run(job: AnonymizeJob, staging: Staging, test_pipeline, handler, decided: Decided, *,
         reference=None) -> dict:  # fmt: skip
    t0 = time.monotonic()
    info, checked = decided.info, decided.checked
    dim = int(info.get("dim") or handler.output_dim or _dim_of(checked.schema, job.emb_col))
    fingerprint = decided.seeds.fingerprint if decided.seeds else ""
    meta = release_metadata(info, forced_columns=list(decided.forced_columns),
                            audited=decided.audit is not None, noise_key_fingerprint=fingerprint,
                            ids=_ids_note(job))  # fmt: skip
    out_schema = release_schema(checked.schema, id_col=job.id_col, emb_col=job.emb_col, dim=dim,
                                columns=list(job.allow_columns), metadata=meta)  # fmt: skip
    q_schema = quarantine_schema(checked.schema.field(job.id_col).type, job.id_col)
    p = pipeline_for(job.beam_args, test_pipeline)
    _build(p, job, staging, handler, decided, dim=dim, out_schema=out_schema, q_schema=q_schema,
           reference=reference)  # fmt: skip
    result = run_to_completion(p)  # staging directories are removed by run_job
    q_doc = publish_quarantine(staging.q_stage, job.quarantine, schema=q_schema)
    q_ids = _quarantined_ids(job, q_doc["rows"])
    verdict: dict = {}
    unchanged: dict = {}  # filled by publish_release from the writer's sidecars

    def gate(staged: str) -> dict | None:
        if decided.audit is None:
            return None
        verified = unchanged.get("unchanged_rows", 0) + unchanged.get("near_rows", 0)
        verdict.update(audit_staged(job, decided.audit, staged, q_ids, aux=staging.aux,
                                    verified=verified))  # fmt: skip
        return verdict

    try:
        rows_out = _publish(job, staging, checked, q_ids, q_doc, out_schema, gate, unchanged)
    except BaseException as e:
        if verdict:  # the gate passed, yet nothing was published
            mark_not_published(verdict, job.output, e)
        raise
    secs = time.monotonic() - t0
    unchanged["verified_in_process"] = reference is not None
    return _summary(job, decided, result, rows_out, q_doc["rows"], secs, verdict, unchanged)


def _publish(job, staging, checked, q_ids, q_doc, out_schema, gate, unchanged) -> int:
    return publish_release(
        staging.stage,
        job.output,
        expected_ids=checked.index,
        quarantined=q_ids,
        id_col=job.id_col,
        emb_col=job.emb_col,
        allow_columns=list(job.allow_columns),
        num_shards=job.serving.shards,
        schema=out_schema,
        gate=gate,
        manifest=True,
        # no path: the release's bytes do not depend on where it (or OUT_quarantine) lives
        quarantine={"rows": q_doc["rows"], "sha256": [p["sha256"] for p in q_doc["parts"]]},
        unchanged=unchanged,
    )


def _build(p, job, staging, handler, decided, *, dim, out_schema, q_schema, reference) -> None:
    """The pipeline: one DoFn per input row group reads, quarantines, modifies and spills
    id-sorted runs; the quarantine is written as one shard, the release merged per shard."""
    modify = ModifyRowGroupFn(
        handler,
        stage=staging.spills,  # the spills go below it (reachable by every worker)
        columns=[job.id_col, job.emb_col, *job.allow_columns],
        batch_rows=job.serving.batch_rows,
        id_col=job.id_col,
        emb_col=job.emb_col,
        dim=dim,
        num_shards=job.serving.shards,
        verify_col=INPUT_COPY,
        progress_every=job.serving.progress_every,
        reference=reference,
        near=None if decided.audit is None else job.policy.max_cosine - NEAR_SLACK,
        seeds=decided.seeds,
    )
    tagged = (
        p
        | "RowGroups" >> beam.Create(plan_row_groups(decided.checked.files))
        | "ReadModifySpill" >> beam.ParDo(modify)
    )
    quarantined = (
        tagged
        | "Quarantined" >> beam.FlatMap(pick, "bad")
        | "WriteQuarantine"
        >> WriteShardedParquet(
            staging.q_stage, id_col=job.id_col, num_shards=1, schema=q_schema, spills=staging.spills
        )  # fmt: skip
    )
    released = (
        tagged
        | "Runs" >> beam.FlatMap(pick, "run")
        | "WriteRelease"
        >> MergeShards(
            staging.stage,
            id_col=job.id_col,
            num_shards=job.serving.shards,
            schema=out_schema,
            verify_col=INPUT_COPY,
            spills=staging.spills,
        )  # fmt: skip
    )
    # DaskRunner computes only the graph of the last transform: join both sinks into it.
    _ = (quarantined, released) | "Done" >> beam.Flatten()


def _quarantined_ids(job: AnonymizeJob, n_bad: int):
    """The quarantined ids (None when none); more than --max-quarantined publishes nothing."""
    if n_bad > job.max_quarantined:
        raise QuarantineThresholdError(
            f"{job.input}: {n_bad} rows quarantined (see {job.quarantine}), more than "
            f"--max-quarantined {job.max_quarantined}: column '{job.emb_col}' "
            f"{_first_quarantined(job.quarantine, job.id_col)}; fix the input or raise the "
            "threshold; nothing published"
        )
    if not n_bad:
        return None
    return read_table(job.quarantine, columns=[job.id_col]).column(job.id_col).combine_chunks()


def _summary(job, decided: Decided, result, rows_out: int, n_bad: int, secs: float,
             verdict: dict, unchanged: dict) -> dict:  # fmt: skip
    rows_in = decided.checked.rows
    summary = {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "quarantined": n_bad,
        "retries": counter(result, "retries"),
        "seconds": round(secs, 3),
        "rows_per_s": round(rows_in / max(secs, 1e-9), 1),
        "output": job.output,
        "quarantine": job.quarantine,
        "model": decided.info.get("name"),
        "model_version": decided.info.get("version"),
        "forced_columns": list(decided.forced_columns),
        "allow_check": [v.to_dict() for v in decided.allow.verdicts],
        "audited": decided.audit is not None,
        "audit_report": verdict.get("report"),
        "ids": "pseudonymous" if job.pseudonymize_ids else "verbatim",
        "noise_key_fingerprint": decided.seeds.fingerprint if decided.seeds else "",
        # rows the signed modifier itself left (near) their input, verified in-process
        "unchanged_rows": unchanged.get("unchanged_rows", 0),
        "near_rows": unchanged.get("near_rows", 0),
        "verified_in_process": unchanged.get("verified_in_process", False),
    }
    kept = ""
    if summary["unchanged_rows"]:
        kept = f"{summary['unchanged_rows']} row(s) left unchanged by the modifier itself, "
    print(
        f"anonymize: {rows_in} rows in, {rows_out} out, {n_bad} quarantined, "
        f"{summary['retries']} retries, {secs:.1f} s, {summary['rows_per_s']:.0f} rows/s, "
        + kept
        + (
            f"audit passed (report {verdict['report']})"
            if decided.audit
            else "UNAUDITED (--no-audit)"
        )  # fmt: skip
    )
    if not job.pseudonymize_ids:
        print(f"anonymize: {VERBATIM_IDS} (column '{job.id_col}')", flush=True)
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
