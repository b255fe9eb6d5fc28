"""Beam job: raw media Parquet -> Triton feature extractor -> embedding dataset Parquet.

    mass extract --input IN --output OUT --model mnist_cnn --raw-col image
        [--repository DIR] [--triton-url HOST:PORT] [--keep-columns digit,colour,...]
        [--id-col id --emb-col emb] [--batch-rows 4096] [--shards 1] [beam flags]

The output holds id, the embedding (float32 fixed-size list) and the kept columns; the raw
column is never copied. Publication is atomic like a release (staging dir, checks, rename).
"""

from __future__ import annotations

import argparse
import logging
import time

import apache_beam as beam
import tritonclient.grpc as grpcclient
from apache_beam.ml.inference.base import RunInference

from beam_pipelines.options import (
    LogProgress,
    add_serving_arguments,
    check_common,
    csv_list,
    pipeline_for,
    run_to_completion,
    shm_mode,
    triton_endpoint,
)
from mass import fs
from mass.errors import MissingInputError, SchemaError, ServingError
from mass.io import check_ids, read_table
from transforms.inference.tensors import ImageInputs, TextInputs
from transforms.inference.triton import TritonModelHandler
from transforms.parquet_io import ReadArrowBatches, input_schema
from transforms.parquet_write import WriteShardedParquet
from transforms.publish import staging_dir
from transforms.release import discard_staging, publish_release
from transforms.validate import check_column_names, release_schema

log = logging.getLogger("mass.extract")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="raw Parquet file, dir or glob")
    parser.add_argument("--output", required=True, help="embedding dataset directory")
    parser.add_argument("--model", default="mnist_cnn", help="extractor name in the repository")
    parser.add_argument("--raw-col", default="image", help="raw media column (image/text)")
    parser.add_argument(
        "--keep-columns",
        type=csv_list,
        default=[],
        help="comma-separated columns copied to the output (labels)",
    )
    parser.add_argument("--id-col", default="id", help="row id column (int64, unique; what keyed noise and joins use)")
    parser.add_argument("--emb-col", default="emb", help="name of the output embedding column")
    add_serving_arguments(parser)


def run(argv: list[str] | None = None, test_pipeline: beam.Pipeline | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="extract")
    add_arguments(parser)
    args, extra = parser.parse_known_args(argv)
    return run_job(args, extra, test_pipeline=test_pipeline)


def model_io(url: str, model: str, version: str = "") -> tuple[str, str, str, int]:
    """(input name, input datatype, output name, output dim) from the served config."""
    try:
        cfg = grpcclient.InferenceServerClient(url).get_model_config(model, version, as_json=True)[
            "config"
        ]
    except Exception as e:
        raise ServingError(f"Triton at {url}: no config for extractor '{model}' ({e})") from e
    if len(cfg["input"]) != 1 or len(cfg["output"]) != 1:
        raise ServingError(
            f"extractor '{model}' must have one input and one output; it has "
            f"{[i['name'] for i in cfg['input']]} -> "
            f"{[o['name'] for o in cfg['output']]}"
        )
    inp, out = cfg["input"][0], cfg["output"][0]
    return (inp["name"], inp["data_type"].removeprefix("TYPE_"), out["name"], int(out["dims"][-1]))


def run_job(args, extra, *, test_pipeline=None) -> dict:
    check_common(args)
    t0 = time.monotonic()
    schema = input_schema(args.input)
    for col in (args.id_col, args.raw_col, *args.keep_columns):
        if col not in schema.names:
            raise SchemaError(
                f"{args.input}: no column '{col}' (columns: {schema.names}); "
                "check --id-col/--raw-col/--keep-columns"
            )
    check_column_names(args.input, id_col=args.id_col, emb_col=args.emb_col,
                       columns=[args.raw_col, *args.keep_columns])  # fmt: skip
    ids = check_ids(read_table(args.input, columns=[args.id_col]), args.id_col, source=args.input)
    if not len(ids):
        raise MissingInputError(f"{args.input}: holds no rows (every file is empty)")
    stage = staging_dir(args.output)
    with triton_endpoint(args, model=args.model) as url:
        in_name, in_type, out_name, dim = model_io(url, args.model, args.model_version)
        inputs = (
            TextInputs(raw_col=args.raw_col, name=in_name)
            if in_type in ("STRING", "BYTES")
            else ImageInputs(raw_col=args.raw_col, name=in_name)
        )
        handler = TritonModelHandler(
            url,
            args.model,
            version=args.model_version,
            inputs=inputs,
            output=out_name,
            output_col=args.emb_col,
            output_dim=dim,
            timeout_s=args.timeout_s,
            max_retries=args.max_retries,
            shared_memory=shm_mode(args),
        )
        meta = {
            b"mass.extractor": args.model.encode(),
            b"mass.extractor_version": (args.model_version or "latest").encode(),
        }
        out_schema = release_schema(schema, id_col=args.id_col, emb_col=args.emb_col, dim=dim,
                                    columns=args.keep_columns, metadata=meta)  # fmt: skip
        p = pipeline_for(extra, test_pipeline)
        _ = (
            p
            | "Read"
            >> ReadArrowBatches(
                args.input,
                batch_rows=args.batch_rows,
                columns=[args.id_col, args.raw_col, *args.keep_columns],
            )
            | "Extract" >> RunInference(handler)
            | "Progress" >> beam.ParDo(LogProgress(args.progress_every, "extract"))
            | "Write"
            >> WriteShardedParquet(
                stage, id_col=args.id_col, num_shards=args.shards, schema=out_schema
            )
        )
        try:
            run_to_completion(p)
            rows = publish_release(
                stage,
                args.output,
                expected_ids=ids,
                id_col=args.id_col,
                emb_col=args.emb_col,
                allow_columns=args.keep_columns,
                num_shards=args.shards,
                schema=out_schema,
                required_metadata=("mass.extractor",),
            )
        finally:
            discard_staging(stage)  # never the version just committed (object stores)
    secs = time.monotonic() - t0
    summary = {
        "rows_in": len(ids),
        "rows_out": rows,
        "seconds": round(secs, 3),
        "rows_per_s": round(len(ids) / max(secs, 1e-9), 1),
        "dim": dim,
        "output": fs.normpath(args.output),
    }
    print(
        f"extract: {len(ids)} rows in, {rows} out, {secs:.1f} s, {summary['rows_per_s']:.0f} rows/s"
    )
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    run()
