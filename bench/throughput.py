"""Rows/s of the anonymize path against its in-process limit (= `mass bench throughput`).

Four measurements on synthetic unit-norm float32 embeddings written to Parquet (``id`` int64,
``emb`` fixed_size_list<float32>[d]), for each ``--rows`` x ``--dims``:

1. ``limit``: one process, pyarrow read -> the same PyTorch modifier (inference_mode, batches of
   ``--batch-rows``) -> pyarrow write. The ceiling every other number is divided by.
2. ``triton``: the exported modifier behind :class:`mass.serving.TritonServer`, driven from
   memory (no Parquet) by the job's own client, :class:`transforms.inference.triton.
   TritonModelHandler`: per request size, N requests in flight, gRPC payloads or system
   shared memory; rows/s and p50/p99 latency per element (``throughput_parts/triton.py``).
3. ``job``: :func:`beam_pipelines.anonymize.run` (read, quarantine, Triton, sharded write,
   fail-closed publish) on FnApiRunner in-memory, FnApiRunner multi_processing (2 workers) and
   DaskRunner (LocalCluster, 2 workers x 1 thread), against the same server.
4. ``train``: :class:`mass.trainer.ModifierTrainer` epoch time vs a bare PyTorch loop over the
   same losses (eq. 9), models and in-memory data (the training limit).

Peak RSS is sampled (psutil, every 50 ms) over this process and all its descendants:
tritonserver and its python stubs, Beam SDK workers, Dask workers. Output: one JSON document
on stdout and in ``--out``; nothing here is asserted, the numbers are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import warnings
from pathlib import Path

if __package__ in (None, ""):  # `python bench/throughput.py`: import bench/ and mass/ from here
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.parquet as pq

from bench import entry
from bench.measure import max_load
from bench.throughput_parts.data import MODEL, make_run, owner_key, reference, write_dataset
from bench.throughput_parts.job import RUNNERS, run_job
from bench.throughput_parts.limit import run_limit
from bench.throughput_parts.train import run_training
from bench.throughput_parts.triton import bench_seeds, run_triton

PARTS = ("limit", "triton", "job", "train")
# as_numpy()/Arrow views are read-only; torch only reads them, the warning is noise.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def _ints(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v.strip()]


def _names(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        out = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in out if v not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {list(allowed)}")
        return out

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rows",
        type=_ints,
        default=[200_000],
        help="rows per dataset, comma-separated (e.g. 200000,1000000)",
    )
    parser.add_argument("--dims", type=_ints, default=[128, 512, 1024], help="embedding dims")
    parser.add_argument(
        "--parts",
        type=_names(PARTS),
        default=list(PARTS),
        help=f"which benchmarks, comma-separated from {','.join(PARTS)}",
    )
    parser.add_argument(
        "--batch-sizes",
        type=_ints,
        default=[256, 1024, 4096, 8192],
        help="Triton request sizes (rows)",
    )
    parser.add_argument(
        "--concurrency",
        type=_ints,
        default=[1, 2, 4],
        help="Triton requests in flight (1 = sync loop)",
    )
    parser.add_argument(
        "--triton-rows",
        type=int,
        default=100_000,
        help="rows sent per Triton-alone run (the first rows of the dataset)",
    )
    parser.add_argument("--runners", type=_names(RUNNERS), default=list(RUNNERS))
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=8192,
        help="rows per Arrow batch in the limit and the job (--batch-rows)",
    )
    parser.add_argument("--shards", type=int, default=2, help="output files of the job")
    parser.add_argument(
        "--job-shm",
        default="auto",
        help="the job's --triton-shm, comma list to compare (auto,on,off)",
    )
    parser.add_argument("--instances", type=int, default=1, help="Triton model instances")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra tritonserver flag, repeatable "
        "(e.g. --server-arg=--backend-config=python,shm-growth-byte-size=67108864)",
    )
    parser.add_argument("--max-batch-size", type=int, default=8192, help="Triton max_batch_size")
    parser.add_argument(
        "--noise-dim",
        type=int,
        default=0,
        help="stochastic modifier noise inputs (0 = deterministic, faithful)",
    )
    parser.add_argument(
        "--limit-threads",
        type=_ints,
        default=[1, os.cpu_count() or 1],
        help="torch threads of the in-process limit, one run each; ratios use "
        "the fastest (1 = the threading of one Triton instance)",
    )
    parser.add_argument("--train-threads", type=int, default=1, help="torch threads, training")
    parser.add_argument("--train-rows", type=_ints, default=[3000, 100_000])
    parser.add_argument("--train-dim", type=int, default=512)
    parser.add_argument(
        "--train-epochs",
        type=_ints,
        default=[3, 1],
        help="epochs per --train-rows entry (per-epoch time is reported)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2,000 rows, d=128, one batch size, FnApiRunner only",
    )
    parser.add_argument("--workdir", default=None, help="data + repository (default: temp)")
    parser.add_argument("--out", default=None, help="write the JSON report here too")
    parser.add_argument("--seed", type=int, default=0)


def apply_quick(args: argparse.Namespace) -> argparse.Namespace:
    if args.quick:
        args.rows, args.dims, args.batch_sizes, args.concurrency = [2000], [128], [1024], [1, 2]
        args.runners, args.batch_rows, args.limit_threads = ["fnapi"], 1024, [1]
        args.train_rows, args.train_epochs, args.train_dim = [600], [1], 128
    return args


# -- orchestration -----------------------------------------------------------------------------
def bench_dataset(args, work: Path, rows: int, dim: int) -> dict:
    from mass.serving import TritonServer
    from mass.serving.export import export_modifier

    data = write_dataset(work / f"emb_{rows}x{dim}.parquet", rows=rows, dim=dim, seed=args.seed)
    run_dir = work / f"run_d{dim}"
    weights = make_run(run_dir, dim=dim, noise_dim=args.noise_dim, seed=args.seed)
    res: dict = {"rows": rows, "dim": dim}
    if "limit" in args.parts:
        res["limits"] = []
        for threads in dict.fromkeys(args.limit_threads):
            r = run_limit(
                data,
                weights,
                work / "limit_out.parquet",
                batch_rows=args.batch_rows,
                threads=threads,
            )
            (work / "limit_out.parquet").unlink(missing_ok=True)
            res["limits"].append(r)
            _say(f"[{rows}x{dim}] limit ({threads} threads) {r['rows_per_s']:.0f} rows/s")
        res["limit"] = max(res["limits"], key=lambda r: r["rows_per_s"])
    if not {"triton", "job"} & set(args.parts):
        return res
    repo = work / f"repo_d{dim}"
    shutil.rmtree(repo, ignore_errors=True)
    owner_key(work)
    export_modifier(
        run_dir, repo, MODEL, max_batch_size=args.max_batch_size, instances=args.instances
    )
    with TritonServer(repo, startup_timeout=300, extra_args=tuple(args.server_arg)) as server:
        res["server_startup_s"] = round(server.startup_seconds or 0.0, 2)
        if "triton" in args.parts:
            table = pq.read_table(data).slice(0, args.triton_rows)
            seeds = bench_seeds()
            first = table.slice(0, max(args.batch_sizes) * max(args.concurrency))
            expected = reference(weights, first, seeds)
            res["triton"] = []
            for batch in args.batch_sizes:
                for conc in args.concurrency:
                    for shm in (False, True):
                        r = run_triton(server.grpc_url, table, seeds, batch=batch,
                                       concurrency=conc, shm=shm, expected=expected)  # fmt: skip
                        res["triton"].append(r)
                        _say(
                            f"[{rows}x{dim}] triton batch={batch} in-flight={conc} shm={shm}: "
                            f"{r['rows_per_s']:.0f} rows/s p50 {r['p50_ms']} ms"
                        )
            del table, expected
        if "job" in args.parts:
            res["job"] = []
            for runner in args.runners:
                for shm in [m for m in args.job_shm.split(",") if m]:
                    r = run_job(
                        data,
                        repo,
                        server.grpc_url,
                        work / "job_out",
                        runner=runner,
                        batch_rows=args.batch_rows,
                        shards=args.shards,
                        rows=rows,
                        shm=shm,
                    )
                    res["job"].append(r)
                    _say(
                        f"[{rows}x{dim}] job {runner} shm={shm}: {r['rows_per_s']:.0f} rows/s, "
                        f"tree RSS {r['peak_tree_rss_mb']:.0f} MB"
                    )
    res["ratios"] = ratios(res)
    return res


def ratios(res: dict) -> dict:
    out: dict = {}
    limit = res.get("limit", {}).get("rows_per_s")
    if not limit:
        return out
    big = [r for r in res.get("triton", []) if r["batch"] >= 1024]
    if big:
        best = max(big, key=lambda r: r["rows_per_s"])
        out["triton_over_limit"] = round(best["rows_per_s"] / limit, 3)
        out["triton_best"] = {k: best[k] for k in ("batch", "concurrency", "shm")}
    if res.get("job"):
        best = max(res["job"], key=lambda r: r["rows_per_s"])
        out["job_over_limit"] = round(best["rows_per_s"] / limit, 3)
        out["job_best_runner"] = best["runner"]
        lim = res["limit"]
        if lim.get("rows_per_cpu_s"):
            cpu = max(res["job"], key=lambda r: r.get("rows_per_cpu_s") or 0)
            out["job_over_limit_cpu"] = round(cpu["rows_per_cpu_s"] / lim["rows_per_cpu_s"], 3)
    # a ratio counts only when every figure it divides was taken on a quiet machine
    figures = [res.get("limit", {}), *res.get("job", []), *res.get("triton", [])]
    out["load_ok"] = all(r.get("load_ok", False) for r in figures if r)
    return out


def load_note(rec: dict) -> str:
    """``load 0.4 -> 0.6`` or ``INVALID: load 3.1 -> 4.2 > 1.5`` for a printed figure."""
    text = f"load {rec.get('load_before')} -> {rec.get('load_after')}"
    return text if rec.get("load_ok") else f"INVALID: {text} > {rec.get('load_limit')}"


def _say(line: str) -> None:
    print(line, flush=True)


def environment(args) -> dict:
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pyarrow": pa.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "loadavg_start": [round(v, 2) for v in os.getloadavg()],
        "load_limit": max_load(),  # figures taken above it carry load_ok: false
        "gpu": False,
        "train_threads": args.train_threads,
        "instances": args.instances,
        "max_batch_size": args.max_batch_size,
        "noise_dim": args.noise_dim,
        "server_args": list(getattr(args, "server_arg", [])),
    }


def run(args: argparse.Namespace) -> int:
    args = apply_quick(args)
    if threading.current_thread() is threading.main_thread():
        # SIGTERM unwinds like Ctrl-C, so TritonServer / LocalCluster exits stop their processes
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report: dict = {"benchmark": "throughput", "environment": environment(args), "datasets": []}
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="mass-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if {"limit", "triton", "job"} & set(args.parts):
            for dim in args.dims:
                for rows in args.rows:
                    report["datasets"].append(bench_dataset(args, work, rows, dim))
        if "train" in args.parts:
            epochs = args.train_epochs + args.train_epochs[-1:] * len(args.train_rows)
            report["training"] = [
                run_training(
                    n, args.train_dim, epochs=e, threads=args.train_threads, seed=args.seed
                )
                for n, e in zip(args.train_rows, epochs, strict=False)
            ]
        report["scaling"] = scaling(report["datasets"])
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    report["environment"]["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    print_summary(report)
    return 0


def scaling(datasets: list[dict]) -> list[dict]:
    """For each dim measured at several row counts: time and RSS growth vs the smallest."""
    out = []
    for dim in sorted({d["dim"] for d in datasets}):
        runs = sorted((d for d in datasets if d["dim"] == dim), key=lambda d: d["rows"])
        if len(runs) < 2:
            continue
        base = runs[0]
        for r in runs[1:]:
            item = {
                "dim": dim,
                "rows": [base["rows"], r["rows"]],
                "row_factor": r["rows"] / base["rows"],
            }
            for part in ("limit",):
                if part in r and part in base:
                    item[f"{part}_time_factor"] = round(
                        r[part]["seconds"] / base[part]["seconds"], 2
                    )
            for a, b in zip(base.get("job", []), r.get("job", []), strict=False):
                item[f"job_{a['runner']}_time_factor"] = round(b["seconds"] / a["seconds"], 2)
                item[f"job_{a['runner']}_rss_mb"] = [a["peak_tree_rss_mb"], b["peak_tree_rss_mb"]]
            out.append(item)
    return out


def print_summary(report: dict) -> None:
    _say(
        "\nsummary (ratios over the in-process limit of the same run: rows/s and rows per "
        f"CPU-second; a figure taken at a 1-min load above {max_load():g} is INVALID)"
    )
    for d in report["datasets"]:
        lim = d.get("limit", {})
        _say(
            f"  rows={d['rows']} d={d['dim']}: limit {lim.get('rows_per_s', '-')} rows/s, "
            f"{lim.get('rows_per_cpu_s', '-')} rows/CPU-s (RSS {lim.get('peak_rss_mb', '-')} MB"
            f"{', ' + load_note(lim) if lim else ''}); {json.dumps(d.get('ratios', {}))}"
        )
        for j in d.get("job", []):
            _say(
                f"    job {j['runner']}: {j['rows_per_s']} rows/s, {j['rows_per_cpu_s']} "
                f"rows/CPU-s, job/limit {j['rows_per_s'] / lim['rows_per_s']:.3f} (rows/s) "
                f"{j['rows_per_cpu_s'] / lim['rows_per_cpu_s']:.3f} (rows/CPU-s), CPU-s "
                f"{json.dumps(j.get('cpu_s_by_process', {}))}, tree RSS "
                f"{j['peak_tree_rss_mb']} MB, {load_note(j)}"
                if lim
                else f"    job {j['runner']}: {j['rows_per_s']} rows/s, {load_note(j)}"
            )
    for t in report.get("training", []):
        _say(
            f"  train rows={t['rows']} d={t['dim']}: trainer {t['trainer_epoch_s']} s/epoch, "
            f"bare {t['bare_epoch_s']} s/epoch, train/limit {t['train_over_limit']}"
        )
    for s in report.get("scaling", []):
        _say(f"  scaling {json.dumps(s)}")


def main(argv: list[str] | None = None) -> int:
    return entry.main(__file__, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
