"""Smoke tests of the throughput harness (`bench/throughput.py`): shapes of the report and
correctness of what it measures. Nothing here asserts a timing."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import throughput as tp
from bench.measure import TreeRss
from bench.throughput_parts.data import make_run, matrix, reference, write_dataset
from bench.throughput_parts.limit import run_limit
from bench.throughput_parts.train import run_training
from mass.noise import row_seeds


def test_synthetic_dataset_is_unit_norm_float32_in_bounded_row_groups(tmp_path):
    path = write_dataset(tmp_path / "emb.parquet", rows=2000, dim=16, seed=0, chunk=700)
    pf = pq.ParquetFile(path)
    assert pf.metadata.num_row_groups == 3 and pf.metadata.num_rows == 2000
    table = pf.read()
    assert table.schema.field("emb").type == pa.list_(pa.float32(), 16)
    x = matrix(table, "emb")
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert table.column("id").to_pylist() == list(range(2000))


def test_limit_writes_exactly_what_the_modifier_computes(tmp_path):
    data = write_dataset(tmp_path / "emb.parquet", rows=2000, dim=16, seed=1)
    weights = make_run(tmp_path / "run", dim=16, noise_dim=4, seed=0)
    out = tmp_path / "out.parquet"
    rec = run_limit(data, weights, out, batch_rows=300, threads=1)
    assert rec["rows"] == 2000 and rec["rows_per_s"] > 0 and rec["peak_rss_mb"] > 0
    got = pq.read_table(out)
    src = pq.read_table(data)
    assert got.column("id").equals(src.column("id"))
    ref = reference(weights, src, row_seeds)
    np.testing.assert_allclose(matrix(got, "emb"), ref, atol=1e-6)


def test_tree_rss_counts_a_child_process_memory():
    import subprocess
    import sys

    code = "import time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); " \
           "time.sleep(1.0)"  # fmt: skip
    with TreeRss(interval=0.02) as rss:
        subprocess.run([sys.executable, "-c", code], check=True)
    assert rss.peak_tree - rss.peak_self > 250 * 2**20
    assert rss.cpu_seconds > 0


def test_training_part_reports_per_epoch_times_of_trainer_and_bare_loop():
    rec = run_training(256, 16, epochs=2, threads=1, seed=0)
    assert len(rec["trainer_epoch_s"]) == 2 and len(rec["bare_epoch_s"]) == 2
    assert rec["train_over_limit"] > 0


def test_cli_limit_only_writes_json_with_ratios_and_environment(tmp_path):
    out = tmp_path / "report.json"
    code = tp.main(["--rows", "1500", "--dims", "8", "--parts", "limit", "--limit-threads", "1",
                    "--batch-rows", "500", "--out", str(out)])  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    (ds,) = report["datasets"]
    assert (ds["rows"], ds["dim"]) == (1500, 8)
    assert ds["limit"]["rows"] == 1500 and ds["limit"]["threads"] == 1
    assert report["environment"]["gpu"] is False
    lim = ds["limit"]  # every figure records the load and whether it was quiet enough
    assert {"load_before", "load_after", "load_limit", "load_ok"} <= set(lim)
    assert lim["load_ok"] == (max(lim["load_before"], lim["load_after"]) <= lim["load_limit"])


def test_ratios_give_rows_per_s_and_rows_per_cpu_s_and_are_invalid_on_a_loaded_machine():
    from bench.measure import load_record

    quiet, busy = load_record(0.4, 0.6), load_record(0.4, 9.0)
    assert quiet["load_ok"] and not busy["load_ok"]
    res = {
        "limit": {"rows_per_s": 100.0, "rows_per_cpu_s": 50.0, **quiet},
        "job": [{"runner": "fnapi", "rows_per_s": 60.0, "rows_per_cpu_s": 40.0, **quiet}],
    }
    r = tp.ratios(res)
    assert (r["job_over_limit"], r["job_over_limit_cpu"], r["load_ok"]) == (0.6, 0.8, True)
    res["job"][0].update(busy)
    assert tp.ratios(res)["load_ok"] is False
    assert "INVALID" in tp.load_note(res["job"][0]) and "INVALID" not in tp.load_note(quiet)


def test_record_batches_pickle_only_their_slice():
    # transforms.parquet_io registers an Arrow-IPC pickle: Beam encodes slices of read batches
    import transforms.parquet_io  # noqa: F401

    x = np.random.default_rng(0).random((10_000, 64), dtype=np.float32)
    from mass.embeddings import embedding_array

    whole = pa.RecordBatch.from_arrays([embedding_array(x)], names=["emb"])
    part = whole.slice(1000, 1000)
    blob = pickle.dumps(part, pickle.HIGHEST_PROTOCOL)
    assert len(blob) < whole.nbytes / 5
    assert pickle.loads(blob).equals(part)


@pytest.mark.slow
@pytest.mark.triton
def test_quick_run_measures_triton_and_the_job_on_a_real_server(tmp_path):
    out = tmp_path / "report.json"
    assert tp.main(["--quick", "--parts", "limit,triton,job", "--out", str(out)]) == 0
    (ds,) = json.loads(out.read_text())["datasets"]
    assert {(r["concurrency"], r["shm"]) for r in ds["triton"]} == {
        (1, False),
        (1, True),
        (2, False),
        (2, True),
    }
    assert all(r["rows"] == 2000 and r["p99_ms"] >= r["p50_ms"] for r in ds["triton"])
    # the job's own client carried the tensors, through shared memory when labelled so
    assert all((r["shm_requests"] > 0) == r["shm"] for r in ds["triton"])
    (job,) = ds["job"]
    assert job["runner"] == "fnapi" and job["rows"] == 2000
    assert job["peak_tree_rss_mb"] > job["peak_rss_mb"]  # tritonserver is in the tree
    assert set(ds["ratios"]) >= {"triton_over_limit", "job_over_limit"}
