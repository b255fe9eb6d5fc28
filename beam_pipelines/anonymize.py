"""Beam job: embeddings Parquet -> Triton modifier -> privatized release Parquet (fail-closed).

    mass anonymize --input IN --output OUT --model NAME [--repository DIR]
        [--triton-url HOST:PORT] [--id-col id --emb-col emb] [--allow-columns a,b]
        [--batch-rows 4096] [--shards N] [--max-quarantined 0] [beam flags, e.g. --runner]

Steps: check the server/model and the input schema before reading data; then one DoFn per
input row group reads Arrow batches, quarantines bad rows, modifies the rest on Triton and
spills id-sorted runs (:mod:`transforms.modify`); one merge per shard writes the staged part
files; verify and rename into OUT (see :mod:`transforms.release`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import time

import apache_beam as beam
import pyarrow as pa

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
from mass.errors import ConfigError, QuarantineThresholdError, SchemaError
from mass.io import read_table
from mass.triton_adapters import verify_version_dir
from transforms.modify import ModifyRowGroupFn, pick
from transforms.parquet_io import IDS_DIR, MergeShards, WriteShardedParquet, plan_row_groups
from transforms.quarantine import publish_quarantine, quarantine_schema
from transforms.release import (
    export_info,
    publish_release,
    recover_output,
    release_metadata,
    resolve_allow_columns,
    server_info,
    staging_dir,
)
from transforms.triton_handler import ModifierInputs, TritonModelHandler
from transforms.validate import CheckedInput, check_dim, check_input, release_schema

log = logging.getLogger("mass.anonymize")
INPUT_COPY = "__mass_input"  # the model's input, carried to the writer for the bypass check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="embedding Parquet file, dir or glob")
    parser.add_argument("--output", required=True, help="release directory (replaced atomically)")
    parser.add_argument("--model", required=True, help="modifier name in the Triton repository")
    parser.add_argument("--id-col", default="id")
    parser.add_argument("--emb-col", default="emb")
    parser.add_argument(
        "--allow-columns",
        type=csv_list,
        default=[],
        help="comma-separated extra columns to release (never labels by default)",
    )
    parser.add_argument(
        "--force-allow",
        action="store_true",
        help="release allow-listed suppressed/raw columns anyway (recorded)",
    )
    parser.add_argument(
        "--max-quarantined",
        type=int,
        default=0,
        help="fail without publishing when more rows are quarantined",
    )
    parser.add_argument("--quarantine", default=None, help="quarantine dir (OUT_quarantine)")
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
    in-process :class:`transforms.triton_handler.FunctionModelHandler`) and its provenance.
    """
    parser = argparse.ArgumentParser(prog="anonymize")
    add_arguments(parser)
    args, extra = parser.parse_known_args(argv)
    return run_job(
        args, extra, test_pipeline=test_pipeline, model_handler=model_handler, model_info=model_info
    )


def run_job(args, extra, *, test_pipeline=None, model_handler=None, model_info=None) -> dict:
    check_common(args)
    if args.max_quarantined < 0:
        raise ConfigError(f"--max-quarantined must be >= 0, got {args.max_quarantined}")
    q_out = args.quarantine or f"{os.path.normpath(args.output)}_quarantine"
    removed = recover_output(args.output) + recover_output(q_out)
    if removed:
        log.warning("cleared leftovers of a killed run: %s", removed)
    args._stage, args._q_stage = staging_dir(args.output), staging_dir(q_out)
    try:
        return _run_checked(args, extra, test_pipeline, model_handler, model_info)
    finally:
        for d in (args._stage, args._q_stage):
            shutil.rmtree(d, ignore_errors=True)


def _run_checked(args, extra, test_pipeline, model_handler, model_info) -> dict:
    # Everything decidable without the server is checked before one is started or contacted.
    local = model_handler is None and os.path.isdir(os.path.join(args.repository, args.model))
    info = model_info or {}
    if local:
        info = export_info(args.repository, args.model, args.model_version or None)
        # The weights must still be the exported ones (the server checks again when loading).
        verify_version_dir(os.path.join(args.repository, args.model, str(info["version"])))
    checked = _check_input(args, info)
    if model_handler is not None:
        return _run(args, extra, test_pipeline, model_handler, info, None, checked)
    expected_sha = info.get("sha256") if local else None
    with triton_endpoint(args, model=args.model, expected_sha256=expected_sha) as url:
        if not local:
            info = server_info(url, args.model, args.model_version)
            checked = _check_input(args, info, checked)
        handler = TritonModelHandler(
            url,
            args.model,
            version=args.model_version,
            inputs=ModifierInputs(id_col=args.id_col, emb_col=args.emb_col),
            output_col=args.emb_col,
            output_dim=int(info["dim"]) if info.get("dim") else None,
            keep_input_as=INPUT_COPY,
            timeout_s=args.timeout_s,
            max_retries=args.max_retries,
            shared_memory=shm_mode(args),
        )
        return _run(args, extra, test_pipeline, handler, info, url, checked)


def _check_input(args, info: dict, checked: CheckedInput | None = None) -> CheckedInput:
    """Files, columns, ids, dimension and allow-list (see :mod:`transforms.validate`)."""
    dim = int(info["dim"]) if info.get("dim") else None
    if checked is None:
        checked = check_input(
            args.input,
            id_col=args.id_col,
            emb_col=args.emb_col,
            columns=args.allow_columns,
            dim=dim,
            index_dir=os.path.join(args._stage, IDS_DIR),
            num_shards=args.shards,
        )
    elif dim is not None:
        check_dim(checked, emb_col=args.emb_col, dim=dim)
    if info:
        resolve_allow_columns(
            args.allow_columns,
            schema=checked.schema,
            suppress=list(info.get("suppress", [])),
            id_col=args.id_col,
            emb_col=args.emb_col,
            force=args.force_allow,
        )
    return checked


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
    meta = release_metadata(info, forced_columns=forced)
    out_schema = release_schema(schema, id_col=args.id_col, emb_col=args.emb_col, dim=dim,
                                columns=args.allow_columns, metadata=meta)  # fmt: skip
    q_out = args.quarantine or f"{os.path.normpath(args.output)}_quarantine"
    q_schema = quarantine_schema(schema.field(args.id_col).type, args.id_col)
    stage, q_stage = args._stage, args._q_stage

    p = pipeline_for(extra, test_pipeline)
    modify = ModifyRowGroupFn(
        handler,
        stage=stage,
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
        >> WriteShardedParquet(q_stage, id_col=args.id_col, num_shards=1, schema=q_schema)
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
        )
    )
    # DaskRunner computes only the graph of the last transform: join both sinks into it.
    _ = (quarantined, released) | "Done" >> beam.Flatten()
    # staging directories are removed by run_job whatever happens
    result = run_to_completion(p)
    n_bad = publish_quarantine(q_stage, q_out, schema=q_schema)
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
    }
    print(
        f"anonymize: {summary['rows_in']} rows in, {rows_out} out, {n_bad} quarantined, "
        f"{summary['retries']} retries, {secs:.1f} s, {summary['rows_per_s']:.0f} rows/s"
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
