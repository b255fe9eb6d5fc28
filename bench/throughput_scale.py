"""Throughput at scale in ONE run (issue 14, item 6) = `mass bench throughput_scale`.

On one synthetic dataset (unit-norm float32, ``--rows`` x ``--dim``, 65,536-row row groups)
and one random MaSS modifier (``throughput_parts/data.py``), measured back to back so the
ratios share the machine's state:

1. ``limit``: the in-process ceiling, pyarrow read -> the same modifier in PyTorch on Arrow
   batches -> pyarrow write (``throughput_parts/limit.py``), once per ``--limit-threads``;
   ratios divide by the fastest.
2. the anonymize job (``beam_pipelines.anonymize.run``, ``--no-audit``) against ONE real
   tritonserver serving the exported modifier, driven by the job's own client, for each of
   ``--jobs``: ``fnapi_local`` (FnApiRunner in memory, local disk), ``dask2_local``
   (DaskRunner on a ``dask scheduler`` + 2 ``dask worker --nthreads 1`` processes, each with
   its own working and scratch directory, ``mass.testing.services.dask_cluster``), and the same
   two on an S3-compatible store (``fnapi_s3``, ``dask2_s3``: moto's server on 127.0.0.1,
   input uploaded before timing, release written there).

Each job first runs once on a small warm-up file (imports, Dask workers, S3 clients), then
once timed. Every release is checked byte-identical to the ``fnapi_local`` one (sha256 of
each committed part). Each record carries rows/s, rows per CPU-second of the whole process
tree (this process, tritonserver and its stub, Dask scheduler + workers, moto), both as
ratios to the same run's limit, the 1-minute load average before and after, and peak RSS.
Output: ``--out`` JSON and a Markdown table (``--md``, default ``--out`` with ``.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/throughput_scale.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import entry
from bench.throughput import _ints, _names, environment
from bench.throughput_parts.data import MODEL, make_run, owner_key, write_dataset
from bench.throughput_parts.job import job_argv, timed_job
from bench.throughput_parts.limit import run_limit

JOBS = ("fnapi_local", "dask2_local", "fnapi_s3", "dask2_s3")
BUCKET = "bench"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the dataset")
    parser.add_argument("--dim", type=int, default=512, help="embedding dimension")
    parser.add_argument("--jobs", type=_names(JOBS), default=list(JOBS),
                        help=f"job configurations, comma-separated from {','.join(JOBS)}")  # fmt: skip
    parser.add_argument("--batch-rows", type=int, default=8192,
                        help="rows per Arrow batch, limit and job (--batch-rows)")  # fmt: skip
    parser.add_argument("--shards", type=int, default=2, help="output files of the job")
    parser.add_argument("--job-shm", default="auto", choices=("auto", "on", "off"),
                        help="the job's --triton-shm")  # fmt: skip
    parser.add_argument("--limit-threads", type=_ints, default=[1, os.cpu_count() or 1],
                        help="torch threads of the limit, one run each; ratios use the fastest")  # fmt: skip
    parser.add_argument("--warmup-rows", type=int, default=8192,
                        help="rows of the untimed warm-up job before each timed one (0: none)")  # fmt: skip
    parser.add_argument("--max-batch-size", type=int, default=8192, help="Triton max_batch_size")
    parser.add_argument("--instances", type=int, default=1, help="Triton model instances")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra tritonserver flag, repeatable")  # fmt: skip
    parser.add_argument("--noise-dim", type=int, default=0,
                        help="stochastic modifier noise inputs (0 = deterministic)")  # fmt: skip
    parser.add_argument("--workdir", default=None, help="data + repository (default: temp)")
    parser.add_argument("--out", default=None, help="write the JSON report here")
    parser.add_argument("--md", default=None, help="write the Markdown table here")
    parser.add_argument("--seed", type=int, default=0)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def release_digest(out: str) -> list[str]:
    """sha256 of each committed part file of the release at ``out`` (local or object store)."""
    from mass import fs
    from mass.formats import committed_parts, part_files

    files = committed_parts(out) if fs.is_remote(out) else part_files(out)
    if not files:
        raise RuntimeError(f"{out}: no committed part files")
    return [hashlib.sha256(fs.read_bytes(p)).hexdigest() for p in files]


def _upload(local: Path, uri: str) -> None:
    from mass import fs

    fs.write_bytes(uri, local.read_bytes())


def run_jobs(args, work: Path, data: Path, warm: Path, repo: Path, url: str) -> list[dict]:
    """The ``--jobs`` configurations in order, each warmed then timed; releases compared."""
    from mass import fs
    from mass.testing.services import dask_cluster, moto_s3

    records: list[dict] = []
    digests: dict[str, list[str]] = {}
    with contextlib.ExitStack() as stack:
        moto = False
        for name in args.jobs:
            runner, storage = name.split("_")
            if storage == "s3" and not moto:  # one store for every s3 job, started once
                moto = bool(stack.enter_context(moto_s3(str(work), BUCKET)))
                _upload(data, f"s3://{BUCKET}/in/{data.name}")
                _upload(warm, f"s3://{BUCKET}/warm/{warm.name}")
            src, warm_src, out = (
                (f"s3://{BUCKET}/in", f"s3://{BUCKET}/warm", f"s3://{BUCKET}/out_{name}")
                if storage == "s3"
                else (str(data), str(warm), str(work / f"out_{name}"))
            )
            with contextlib.ExitStack() as cluster:
                flags: list[str] = []
                if runner == "dask2":  # started inside moto's context: workers get its AWS_*
                    root = work / f"cluster_{name}"
                    shutil.rmtree(root, ignore_errors=True)
                    address = cluster.enter_context(dask_cluster(str(root), 2))
                    flags = ["--runner=DaskRunner", f"--dask_client_address={address}"]
                    if storage == "s3":  # a store release on a cluster: private scratch there
                        flags.append(f"--temp_location=s3://{BUCKET}/tmp_{name}")

                def argv(s: str, o: str, fl=flags) -> list[str]:
                    return job_argv(s, o, repo, url, batch_rows=args.batch_rows,
                                    shards=args.shards, shm=args.job_shm, flags=fl)  # fmt: skip

                if args.warmup_rows:
                    from beam_pipelines import anonymize

                    anonymize.run(argv(warm_src, out + "_warm"))
                    for d in (out + "_warm", out + "_warm_quarantine"):
                        fs.rmtree(d)
                rec: dict = {"name": name, "runner": runner, "storage": storage,
                             "batch_rows": args.batch_rows, "shards": args.shards,
                             "shm": args.job_shm, "load_1m": [_load()]}  # fmt: skip
                timed_job(rec, argv(src, out), args.rows)
                rec["load_1m"].append(_load())
            digests[name] = release_digest(out)
            for d in (out, out + "_quarantine"):
                fs.rmtree(d)
            records.append(rec)
            _say(f"{name}: {rec['rows_per_s']:.0f} rows/s, {rec['rows_per_cpu_s']:.0f} rows/CPU-s,"
                 f" load {rec['load_1m']}" + ("" if rec.get("load_ok") else
                 f" INVALID (load above {rec['load_limit']})"))  # fmt: skip
    ref = digests.get("fnapi_local") or next(iter(digests.values()), None)
    for rec in records:
        rec["release_identical"] = digests[rec["name"]] == ref
        if not rec["release_identical"]:
            raise RuntimeError(f"{rec['name']}: release differs from the reference run")
    return records


def add_ratios(report: dict) -> None:
    limit = report["limit"]
    for rec in [*report["limits"], *report["jobs"]]:
        rec["over_limit"] = round(rec["rows_per_s"] / limit["rows_per_s"], 3)
        rec["cpu_over_limit"] = round(rec["rows_per_cpu_s"] / limit["rows_per_cpu_s"], 3)
    by = {r["name"]: r for r in report["jobs"]}
    pairs = {"dask2_local / fnapi_local": ("dask2_local", "fnapi_local"),
             "fnapi_s3 / fnapi_local": ("fnapi_s3", "fnapi_local"),
             "dask2_s3 / dask2_local": ("dask2_s3", "dask2_local"),
             "dask2_s3 / fnapi_s3": ("dask2_s3", "fnapi_s3")}  # fmt: skip
    report["comparisons"] = {
        k: {"rows_per_s": round(by[a]["rows_per_s"] / by[b]["rows_per_s"], 3),
            "rows_per_cpu_s": round(by[a]["rows_per_cpu_s"] / by[b]["rows_per_cpu_s"], 3),
            "load_ok": bool(by[a].get("load_ok") and by[b].get("load_ok"))}
        for k, (a, b) in pairs.items() if a in by and b in by
    }  # fmt: skip


LABELS = {"fnapi": "FnApiRunner (in memory)", "dask2": "DaskRunner, 2 worker processes",
          "local": "local disk", "s3": "S3 (moto, 127.0.0.1)"}  # fmt: skip


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"{report['rows']:,} rows x d={report['dim']}, batch rows {report['batch_rows']}, "
        f"{env['cpus']} CPUs, load average at start {env['loadavg_start']}, "
        f"at end {env['loadavg_end']}",
        "",
        "| run | storage | rows/s | rows/CPU-s | / limit (rows/s) | / limit (rows/CPU-s) "
        "| load 1-min before -> after | peak RSS MB own / tree |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in report["limits"]:
        best = " (the limit)" if r is report["limit"] else ""
        lines.append(_row(f"in-process limit, {r['threads']} torch thread(s){best}", "local disk",
                          r))  # fmt: skip
    for r in report["jobs"]:
        lines.append(_row(f"job, {LABELS[r['runner']]}, Triton", LABELS[r["storage"]], r))
    if report.get("comparisons"):
        lines += ["", "| same run | rows/s | rows/CPU-s |", "|---|---:|---:|"]
        for k, v in report["comparisons"].items():
            lines.append(f"| {k} | {v['rows_per_s']:.2f} | {v['rows_per_cpu_s']:.2f} |")
    return "\n".join(lines) + "\n"


def _row(label: str, storage: str, r: dict) -> str:
    load = " -> ".join(f"{v:.1f}" for v in r.get("load_1m") or
                       (r["load_before"], r["load_after"]))  # fmt: skip
    if r.get("load_ok") is False:
        load += f" INVALID (> {r.get('load_limit')})"
    return (f"| {label} | {storage} | {r['rows_per_s']:,.0f} | {r['rows_per_cpu_s']:,.0f} | "
            f"{r['over_limit']:.2f} | {r['cpu_over_limit']:.2f} | {load} | "
            f"{r['peak_rss_mb']:.0f} / {r['peak_tree_rss_mb']:.0f} |")  # fmt: skip


def _say(line: str) -> None:
    print(line, flush=True)


def run(args: argparse.Namespace) -> int:
    from mass.serving import TritonServer
    from mass.serving.export import export_modifier

    args.train_threads = 0  # environment() reports it; no training here
    report: dict = {"benchmark": "throughput_scale", "rows": args.rows, "dim": args.dim,
                    "batch_rows": args.batch_rows, "environment": environment(args),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}  # fmt: skip
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="mass-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        data = write_dataset(work / f"emb_{args.rows}x{args.dim}.parquet", rows=args.rows,
                             dim=args.dim, seed=args.seed)  # fmt: skip
        warm = write_dataset(work / f"warm_{args.dim}.parquet", rows=max(args.warmup_rows, 1),
                             dim=args.dim, seed=args.seed + 1)  # fmt: skip
        weights = make_run(work / "run", dim=args.dim, noise_dim=args.noise_dim, seed=args.seed)
        report["limits"] = []
        for threads in dict.fromkeys(args.limit_threads):
            rec = {"name": f"limit_{threads}t", "load_1m": [_load()]}
            rec.update(run_limit(data, weights, work / "limit_out.parquet",
                                 batch_rows=args.batch_rows, threads=threads))  # fmt: skip
            rec["load_1m"].append(_load())
            (work / "limit_out.parquet").unlink(missing_ok=True)
            report["limits"].append(rec)
            _say(f"limit ({threads} threads): {rec['rows_per_s']:.0f} rows/s")
        report["limit"] = max(report["limits"], key=lambda r: r["rows_per_s"])
        repo = work / "repo"
        shutil.rmtree(repo, ignore_errors=True)
        owner_key(work)
        export_modifier(work / "run", repo, MODEL, max_batch_size=args.max_batch_size,
                        instances=args.instances)  # fmt: skip
        with TritonServer(repo, startup_timeout=300, extra_args=tuple(args.server_arg)) as srv:
            report["jobs"] = run_jobs(args, work, data, warm, repo, srv.grpc_url)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    report["environment"]["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    add_ratios(report)
    table = markdown(report)
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    md = args.md or (str(Path(args.out).with_suffix(".md")) if args.out else None)
    if md:
        Path(md).write_text(table)
    print(text)
    print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    return entry.main(__file__, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
