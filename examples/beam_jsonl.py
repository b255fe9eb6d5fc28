"""A user's own Beam pipeline: JSON lines in, anonymized through Triton, audited, Parquet out.

    python examples/beam_jsonl.py --input rows.jsonl --labels labels.parquet \\
        --repository triton_models --model mine --output out/ [--triton-url HOST:PORT]

Rows ({"id": ..., "emb": [...]} per line) go through :class:`transforms.api.Anonymize` (the
signed model, served by Triton: a local server on --repository unless --triton-url names
one), the dead letters to OUTPUT/quarantined*, and :class:`transforms.api.AuditGate` stands
before the Parquet sink: a failed audit fails the run and the sink writes nothing. The owner
key is found as `mass anonymize` finds it ($MASS_NOISE_KEY_FILE, .mass/local.yaml).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

import apache_beam as beam
import pyarrow as pa

from transforms.api import Anonymize, AuditGate

SCHEMA = pa.schema([("id", pa.int64()), ("emb", pa.list_(pa.float32()))])


@contextlib.contextmanager
def triton(repository: str, url: str | None):
    """``url``, or a local tritonserver on ``repository`` for the pipeline's duration."""
    if url:
        yield url
        return
    from mass.serving import TritonServer

    with TritonServer(repository) as server:
        yield server.grpc_url


def build(p, args, url: str) -> None:
    anon = Anonymize(args.model, repository=args.repository, triton_url=url)
    out = (
        p
        | "Read" >> beam.io.ReadFromText(args.input)
        | "Parse" >> beam.Map(json.loads)
        | "Anonymize" >> anon
    )
    _ = (out.quarantined | "DeadLetters" >> beam.Map(json.dumps)
         | "WriteDead" >> beam.io.WriteToText(os.path.join(args.output, "quarantined")))  # fmt: skip
    _ = (
        out.rows
        | "Gate" >> AuditGate(args.labels, args.policy, anonymize=anon, report_dir=args.report)
        | "Write" >> beam.io.WriteToParquet(os.path.join(args.output, "part"), SCHEMA)
    )


def run(argv: list[str] | None = None, test_pipeline=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--input", "--labels", "--repository", "--model", "--output"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--triton-url", default=None)
    ap.add_argument("--policy", default=None, help="params.yaml with an audit: section")
    ap.add_argument("--report", default=None, help="audit report directory")
    args, beam_args = ap.parse_known_args(argv)
    with triton(args.repository, args.triton_url) as url:
        p = test_pipeline or beam.Pipeline(argv=beam_args)
        build(p, args, url)
        p.run().wait_until_finish()


if __name__ == "__main__":
    run()
