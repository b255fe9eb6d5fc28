"""`bench/throughput_scale.py`: the one-run comparison of issue 14 item 6. The ratios and the
table are checked on a made-up report; the slow test runs every configuration for real on a
tiny dataset (tritonserver, a 2-worker dask cluster, moto). Nothing here asserts a timing."""

from __future__ import annotations

import json

import pytest

from bench import throughput_scale as ts


def _rec(name, rows_per_s, rows_per_cpu_s, **kw):
    return {"name": name, "rows_per_s": rows_per_s, "rows_per_cpu_s": rows_per_cpu_s,
            "load_1m": [1.0, 2.0], "peak_rss_mb": 100.0, "peak_tree_rss_mb": 300.0, **kw}  # fmt: skip


def test_ratios_divide_by_the_fastest_limit_of_the_same_run_and_the_table_shows_them():
    limits = [
        _rec("limit_1t", 10_000, 20_000, threads=1),
        _rec("limit_2t", 8_000, 10_000, threads=2),
    ]
    jobs = [_rec("fnapi_local", 8_000, 15_000, runner="fnapi", storage="local"),
            _rec("dask2_local", 4_000, 7_500, runner="dask2", storage="local"),
            _rec("fnapi_s3", 1_000, 2_000, runner="fnapi", storage="s3")]  # fmt: skip
    report = {"rows": 1000, "dim": 8, "batch_rows": 100, "limits": limits, "limit": limits[0],
              "jobs": jobs, "environment": {"cpus": 2, "loadavg_start": [1, 1, 1],
                                            "loadavg_end": [2, 2, 2]}}  # fmt: skip
    ts.add_ratios(report)
    assert [j["over_limit"] for j in jobs] == [0.8, 0.4, 0.1]
    assert [j["cpu_over_limit"] for j in jobs] == [0.75, 0.375, 0.1]
    assert limits[1]["over_limit"] == 0.8
    assert report["comparisons"] == {  # records without a quiet load are never load_ok
        "dask2_local / fnapi_local": {"rows_per_s": 0.5, "rows_per_cpu_s": 0.5, "load_ok": False},
        "fnapi_s3 / fnapi_local": {"rows_per_s": 0.125, "rows_per_cpu_s": 0.133, "load_ok": False},
    }
    table = ts.markdown(report)
    assert (
        "| job, DaskRunner, 2 worker processes, Triton | local disk | 4,000 | 7,500 | 0.40 |"
        in table
    )
    assert (
        "1 torch thread(s) (the limit)" in table
        and "| fnapi_s3 / fnapi_local | 0.12 | 0.13 |" in table
    )


@pytest.mark.slow
@pytest.mark.triton
def test_one_run_measures_every_configuration_and_checks_the_releases(tmp_path):
    out = tmp_path / "scale.json"
    assert ts.main(["--rows", "3000", "--dim", "16", "--batch-rows", "1000", "--limit-threads",
                    "1", "--warmup-rows", "500", "--out", str(out)]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    assert [j["name"] for j in report["jobs"]] == list(ts.JOBS)
    for j in report["jobs"]:
        assert j["rows"] == 3000 and j["release_identical"] and j["over_limit"] > 0
        kinds = set(j["cpu_s_by_process"])
        assert "tritonserver" in kinds  # the real server is in the measured tree
        assert ("dask worker" in kinds) == (j["runner"] == "dask2")
        assert ("moto_server" in kinds) == (j["storage"] == "s3")
    assert set(report["comparisons"]) == {"dask2_local / fnapi_local", "fnapi_s3 / fnapi_local",
                                          "dask2_s3 / dask2_local", "dask2_s3 / fnapi_s3"}  # fmt: skip
    assert (
        "| job, FnApiRunner (in memory), Triton | S3 (moto, 127.0.0.1) |"
        in (tmp_path / "scale.md").read_text()
    )
