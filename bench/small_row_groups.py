"""Throughput of `mass anonymize` on one file written with thousands of tiny row groups.

    python bench/small_row_groups.py --rows 20000 --row-groups 2000 [--triton] [--work DIR]

Without ``--triton`` the model is the in-process stand-in (mass.testing.stand_ins.NumpyModifier),
so the number isolates the job's reading/planning/spill cost; with ``--triton`` a 16-d
DataModifier is exported and the job runs as `mass anonymize` against a local tritonserver.
Prints the job's summary rows/s (its clock starts after input validation and server start).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DIM = 16


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--row-groups", type=int, default=2000)
    ap.add_argument("--triton", action="store_true")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    from mass.embeddings import embedding_array

    work = Path(a.work or tempfile.mkdtemp(prefix="small-rg-"))
    work.mkdir(parents=True, exist_ok=True)
    src = work / "small_groups.parquet"
    x = np.random.default_rng(0).normal(size=(a.rows, DIM)).astype(np.float32)
    table = pa.table({"id": pa.array(np.arange(a.rows)), "emb": embedding_array(x)})
    pq.write_table(table, src, row_group_size=max(1, a.rows // a.row_groups))
    meta = pq.ParquetFile(src).metadata
    print(f"{src}: {meta.num_row_groups} row groups, footer {meta.serialized_size} bytes")
    out = work / "release"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.monotonic()
    if a.triton:
        import torch

        from mass.modifiers import DataModifier, ModifierSpec, save_modifier
        from mass.serving.export import export_modifier

        torch.manual_seed(0)
        (work / "run").mkdir(exist_ok=True)
        save_modifier(DataModifier(ModifierSpec(DIM, hidden=(32,))), str(work / "run" / "modifier.pt"),
                      method="mass", suppress=["s"], preserve=[], config_hash="bench")  # fmt: skip
        shutil.rmtree(work / "repo", ignore_errors=True)
        export_modifier(work / "run", work / "repo", "mod", max_batch_size=4096)
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "mass.cli", "anonymize", "--input", str(src),
                            "--output", str(out), "--model", "mod", "--repository",
                            str(work / "repo")], capture_output=True, text=True, env=os.environ)  # fmt: skip
        line = [x for x in r.stdout.splitlines() if x.startswith("anonymize:")]
        print(line[-1] if line else r.stderr[-2000:])
    else:
        from beam_pipelines import anonymize
        from mass.testing.stand_ins import NumpyModifier
        from transforms.inference.function import FunctionModelHandler

        info = {"name": "np", "version": 1, "sha256": "0", "method": "test", "suppress": ["s"],
                "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip
        handler = FunctionModelHandler(NumpyModifier(), output_dim=DIM,
                                       keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
        anonymize.run(["--input", str(src), "--output", str(out), "--model", "np"],
                      model_handler=handler, model_info=info)  # fmt: skip
    print(f"wall {time.monotonic() - t0:.1f} s for {a.rows} rows")


if __name__ == "__main__":
    main()
