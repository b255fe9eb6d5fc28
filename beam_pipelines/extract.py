"""Beam job: raw media Parquet -> Triton feature extractor -> embedding dataset Parquet.

    mass extract --input IN --output OUT --model mnist_cnn --raw-col image
        [--repository DIR] [--triton-url HOST:PORT] [--keep-columns digit,colour,...]
        [--id-col id --emb-col emb] [--batch-rows 4096] [--shards 1] [beam options | -- beam options]

The output holds id, the embedding (float32 fixed-size list) and the kept columns; the raw
column is never copied. Publication is atomic like a release (staging dir, checks, rename).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import apache_beam as beam
import tritonclient.grpc as grpcclient
from apache_beam.ml.inference.base import RunInference

from beam_pipelines.options import (
    LogProgress,
    Serving,
    add_serving_arguments,
    parse_job_argv,
    pipeline_for,
    plan_serving,
    run_to_completion,
    triton_endpoint,
)
from mass import fs
from mass.batches.parquet import input_schema
from mass.batches.validate import check_column_names
from mass.errors import MissingInputError, SchemaError, ServingError
from mass.io import check_ids, read_table
from mass.names import add_column_arguments, split_names
from mass.release.columns import release_schema
from mass.release.commit import discard_staging, staging_dir
from mass.release.publish import publish_release
from mass.serving.contract import served_sha256
from mass.serving.tensors import ImageInputs, TextInputs
from transforms.inference.triton import TritonModelHandler
from transforms.parquet_io import ReadArrowBatches
from transforms.parquet_write import WriteShardedParquet

log = logging.getLogger("mass.extract")


@dataclass(frozen=True)
class ExtractJob:
    """Every setting of `mass extract`, built once from the parsed flags (:func:`plan_extract`)."""

    input: str
    output: str
    model: str
    raw_col: str
    keep_columns: tuple[str, ...]
    id_col: str
    emb_col: str
    serving: Serving
    beam_args: tuple[str, ...]


def plan_extract(args: argparse.Namespace, beam_args: Sequence[str] = ()) -> ExtractJob:
    return ExtractJob(
        input=args.input,
        output=args.output,
        model=args.model,
        raw_col=args.raw_col,
        keep_columns=tuple(args.keep_columns),
        id_col=args.id_col,
        emb_col=args.emb_col,
        serving=plan_serving(args),
        beam_args=tuple(beam_args),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="raw Parquet file, dir or glob")
    parser.add_argument("--output", required=True, help="embedding dataset directory")
    parser.add_argument("--model", default="mnist_cnn", help="extractor name in the repository")
    parser.add_argument("--raw-col", default="image", help="raw media column (image/text)")
    parser.add_argument(
        "--keep-columns",
        type=split_names,
        default=[],
        help="comma-separated columns copied to the output (labels)",
    )
    add_column_arguments(parser, emb_help="name of the output embedding column")
    add_serving_arguments(parser)


def run(argv: list[str] | None = None, test_pipeline: beam.Pipeline | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="extract", allow_abbrev=False)
    add_arguments(parser)
    args, beam_args = parse_job_argv(parser, argv)
    return run_job(plan_extract(args, beam_args), test_pipeline=test_pipeline)


def model_io(url: str, model: str, version: str = "") -> tuple[str, str, str, int, str, str | None]:
    """(input name, input datatype, output name, output dim, the version served: ``version``,
    else the newest the server has loaded, the weights sha256 its config records for that
    version) from the served config and metadata."""
    try:
        client = grpcclient.InferenceServerClient(url)
        cfg = client.get_model_config(model, version, as_json=True)["config"]
        loaded = client.get_model_metadata(model, version, as_json=True).get("versions", [])
    except Exception as e:
        raise ServingError(f"Triton at {url}: no config for extractor '{model}' ({e})") from e
    served = version or max(loaded, key=int, default="")
    if len(cfg["input"]) != 1 or len(cfg["output"]) != 1:
        raise ServingError(
            f"extractor '{model}' must have one input and one output; it has "
            f"{[i['name'] for i in cfg['input']]} -> "
            f"{[o['name'] for o in cfg['output']]}"
        )
    inp, out = cfg["input"][0], cfg["output"][0]
    dim = int(out["dims"][-1])
    sha = served_sha256(cfg.get("parameters", {}), served)
    return inp["name"], inp["data_type"].removeprefix("TYPE_"), out["name"], dim, served, sha


def run_job(job: ExtractJob, *, test_pipeline=None) -> dict:
    """Run the planned job (:func:`beam_pipelines.plan.plan_extract`)."""
    t0 = time.monotonic()
    schema = input_schema(job.input)
    for col in (job.id_col, job.raw_col, *job.keep_columns):
        if col not in schema.names:
            raise SchemaError(
                f"{job.input}: no column '{col}' (columns: {schema.names}); "
                "check --id-col/--raw-col/--keep-columns"
            )
    check_column_names(job.input, id_col=job.id_col, emb_col=job.emb_col,
                       columns=[job.raw_col, *job.keep_columns])  # fmt: skip
    ids = check_ids(read_table(job.input, columns=[job.id_col]), job.id_col, source=job.input)
    if not len(ids):
        raise MissingInputError(f"{job.input}: holds no rows (every file is empty)")
    stage = staging_dir(job.output)
    with triton_endpoint(job.serving, model=job.model) as url:
        try:
            rows, dim, truncated = _extract(job, url, schema, ids, stage, test_pipeline)
        finally:
            discard_staging(stage)  # never the version just committed (object stores)
    secs = time.monotonic() - t0
    summary = {
        "rows_in": len(ids),
        "rows_out": rows,
        "seconds": round(secs, 3),
        "rows_per_s": round(len(ids) / max(secs, 1e-9), 1),
        "dim": dim,
        "output": fs.normpath(job.output),
        # texts past the served MiniLM's window (None: not that model, not counted)
        "texts_truncated": truncated,
    }
    print(
        f"extract: {len(ids)} rows in, {rows} out, {secs:.1f} s, {summary['rows_per_s']:.0f} rows/s"
    )
    return summary


def _check_texts(job: ExtractJob, schema):
    """A text extractor's --raw-col holds strings, none null: refused by name before the
    pipeline (before: an AttributeError inside Beam's RunInference). Returns the texts."""
    import pyarrow as pa

    from mass.errors import InvalidValueError, first_null

    typ = schema.field(job.raw_col).type
    typ = typ.value_type if pa.types.is_dictionary(typ) else typ
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        raise SchemaError(f"{job.input}: --raw-col '{job.raw_col}' is {typ}; the text "
                          f"extractor '{job.model}' reads strings")  # fmt: skip
    col = read_table(job.input, columns=[job.raw_col]).column(job.raw_col).combine_chunks()
    if col.null_count:
        row = first_null(col)
        raise InvalidValueError(f"{job.input}: --raw-col '{job.raw_col}' row {row} is null "
                                f"({col.null_count} in all); give every row a text or drop "
                                "it")  # fmt: skip
    return col


def count_truncated(job: ExtractJob, sha256: str | None, texts) -> int | None:
    """How many ``texts`` are longer than the served MiniLM's window (it embeds only their
    opening: :mod:`mass.serving.textwindow`), warned with the first row; None when the served
    text extractor (its weights' ``sha256``, :func:`model_io`) is not the installed MiniLM."""
    from mass.serving.textwindow import over_window, window_for

    window = window_for(sha256)
    if window is None:
        return None
    count, first, pieces = over_window(texts, window)
    if count:
        msg = (f"extract: {count} of {len(texts)} texts in {job.input} --raw-col "
               f"'{job.raw_col}' are longer than {job.model}'s window of {window.limit} word "
               f"pieces (first: row {first}, {pieces}); the model embeds only their opening, "
               "the rest of each is not in its embedding: split long texts into passages "
               "first")  # fmt: skip
        log.warning(msg)
        print(msg)
    return count


def _extract(job: ExtractJob, url: str, schema, ids, stage: str,
             test_pipeline) -> tuple[int, int, int | None]:  # fmt: skip
    """(rows published, embedding dimension, texts past the window: :func:`count_truncated`):
    the pipeline through the served extractor."""
    srv = job.serving
    in_name, in_type, out_name, dim, served, sha = model_io(url, job.model, srv.model_version)
    text = in_type in ("STRING", "BYTES")
    truncated = None
    if text:
        truncated = count_truncated(job, sha, _check_texts(job, schema))
    inputs = (TextInputs if text else ImageInputs)(raw_col=job.raw_col, name=in_name)
    handler = TritonModelHandler(
        url,
        job.model,
        version=srv.model_version,
        inputs=inputs,
        output=out_name,
        output_col=job.emb_col,
        output_dim=dim,
        timeout_s=srv.timeout_s,
        max_retries=srv.max_retries,
        shared_memory=srv.shared_memory,
    )
    meta = {
        b"mass.extractor": job.model.encode(),
        b"mass.extractor_version": (served or "unknown").encode(),
    }
    out_schema = release_schema(schema, id_col=job.id_col, emb_col=job.emb_col, dim=dim,
                                columns=list(job.keep_columns), metadata=meta)  # fmt: skip
    p = pipeline_for(job.beam_args, test_pipeline)
    columns = [job.id_col, job.raw_col, *job.keep_columns]
    _ = (
        p
        | "Read" >> ReadArrowBatches(job.input, batch_rows=srv.batch_rows, columns=columns)
        | "Extract" >> RunInference(handler)
        | "Progress" >> beam.ParDo(LogProgress(srv.progress_every, "extract"))
        | "Write"
        >> WriteShardedParquet(stage, id_col=job.id_col, num_shards=srv.shards, schema=out_schema)
    )
    run_to_completion(p)
    rows = publish_release(
        stage,
        job.output,
        expected_ids=ids,
        id_col=job.id_col,
        emb_col=job.emb_col,
        allow_columns=list(job.keep_columns),
        num_shards=srv.shards,
        schema=out_schema,
        required_metadata=("mass.extractor",),
    )
    return rows, dim, truncated


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    run()
