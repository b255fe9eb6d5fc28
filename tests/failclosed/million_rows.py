"""Scale check, not part of the test run: N x d anonymize on a real Triton, every row counted.

    .venv/bin/python tests/failclosed/million_rows.py --rows 1000000 --dim 128 --work /tmp/m

Writes the input in row groups (never all in memory), exports a Table-7-sized DataModifier
(hidden 256-128-256) into a fresh repository, starts tritonserver, runs ``mass anonymize``
as a subprocess (``--batch-rows 4096 --shards 4``) and samples the RSS of the job process
tree and of the server tree. Prints one JSON line: seconds, rows/s, peak RSS (MiB) of the job
(``ru_maxrss`` of the child and the sampled tree) and of the server, rows released and
quarantined, and whether the released ids equal the input ids exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_input(path: Path, rows: int, dim: int, *, chunk: int = 65536) -> None:
    from mass.embeddings import embedding_array

    schema = pa.schema([("id", pa.int64()), ("emb", pa.list_(pa.float32(), dim))])
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(str(path), schema, compression="zstd") as w:
        for a in range(0, rows, chunk):
            n = min(chunk, rows - a)
            x = rng.normal(size=(n, dim)).astype(np.float32)
            ids = pa.array(np.arange(a, a + n, dtype=np.int64))
            w.write_table(pa.table({"id": ids, "emb": embedding_array(x)}, schema=schema))


def export(repo: Path, run: Path, dim: int) -> None:
    import torch

    from mass.modifiers import DataModifier, ModifierSpec, save_modifier
    from mass.serving.export import export_modifier

    torch.manual_seed(0)
    run.mkdir(parents=True, exist_ok=True)
    save_modifier(DataModifier(ModifierSpec(dim, hidden=(256, 128, 256))),
                  str(run / "modifier.pt"), method="mass", suppress=["s"], preserve=[],
                  config_hash="scale")  # fmt: skip
    export_modifier(run, repo, "mod", max_batch_size=4096)


def tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--work", default="/tmp/mass-million")
    ap.add_argument("--batch-rows", type=int, default=4096)
    ap.add_argument("--shards", type=int, default=4)
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"in-{a.rows}x{a.dim}.parquet"
    if not src.exists():
        write_input(src, a.rows, a.dim)
    repo = work / "repo"
    if not repo.exists():
        export(repo, work / "run", a.dim)

    from mass.serving import TritonServer

    out = work / "release"
    with TritonServer(repo) as server:
        cmd = [sys.executable, "-m", "mass.cli", "anonymize", "--input", str(src),
               "--output", str(out), "--model", "mod", "--repository", str(repo),
               "--triton-url", server.grpc_url, "--batch-rows", str(a.batch_rows),
               "--shards", str(a.shards), "--no-audit"]  # fmt: skip
        peaks = {"job": 0, "server": 0}
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def sample():
            while proc.poll() is None:
                peaks["job"] = max(peaks["job"], tree_rss(proc.pid))
                peaks["server"] = max(peaks["server"], tree_rss(server.process.pid))
                time.sleep(0.2)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        log = proc.communicate()[0]
        seconds = time.monotonic() - t0
        thread.join()
    if proc.returncode != 0:
        print(log[-3000:])
        raise SystemExit(f"anonymize failed with exit code {proc.returncode}")
    released = pq.read_table(out, columns=["id"]).column("id").combine_chunks()
    quarantined = pq.read_table(f"{out}_quarantine").num_rows
    ids_equal = len(released) == a.rows and bool(
        np.array_equal(np.sort(released.to_numpy()), np.arange(a.rows))
    )
    summary_line = next((ln for ln in log.splitlines() if ln.startswith("anonymize:")), "")
    result = {
        "rows": a.rows,
        "dim": a.dim,
        "batch_rows": a.batch_rows,
        "shards": a.shards,
        "seconds_wall_job": round(seconds, 1),
        "rows_per_s": round(a.rows / seconds, 1),
        "job_peak_rss_mib_ru_maxrss": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
        ),
        "job_peak_rss_mib_sampled": round(peaks["job"] / 2**20, 1),
        "server_peak_rss_mib_sampled": round(peaks["server"] / 2**20, 1),
        "rows_released": len(released),
        "rows_quarantined": quarantined,
        "ids_equal_input": ids_equal,
        "job_summary": summary_line,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
