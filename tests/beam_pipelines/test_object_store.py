"""The anonymize job on an S3-compatible object store (moto's server on 127.0.0.1, reached
through the standard AWS_* variables, as s3fs and others test in CI): input, release and
quarantine in the store, staging in private scratch (tests/failclosed/test_store_staging.py);
publication by versioned prefix + pointer;
and (slow) on a 2-worker dask.distributed cluster of separate processes with disjoint
scratch and working directories, plus `dvc push` to the same store."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass import fs
from mass.errors import OutputPathError, ReleaseError
from mass.formats import VERSIONS, committed_parts
from mass.io import expand_paths, read_table
from mass.testing.services import BIN, REPO, dask_cluster
from mass.testing.stand_ins import Bypass, NumpyModifier, write_embeddings
from transforms.inference.function import FunctionModelHandler

INFO = {"name": "np", "version": 3, "sha256": "abc", "method": "test", "suppress": ["digit"],
        "preserve": [], "config_hash": "h", "dim": 16}  # fmt: skip


@pytest.fixture(scope="module")
def local_src(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("in") / "emb.parquet")
    write_embeddings(path, rows=1000, dim=16, row_group=300)
    return path


def _upload(local: str, uri: str) -> str:
    with open(local, "rb") as f:
        fs.write_bytes(uri, f.read())
    return uri


def _run(src, out, *flags, load=None):
    argv = ["--input", src, "--output", out, "--model", "np", "--no-audit", *flags]
    handler = FunctionModelHandler(load or NumpyModifier(), output_dim=16,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


def _local_parts(out: str) -> dict[str, bytes]:
    return {os.path.basename(p): open(p, "rb").read()
            for p in sorted(glob.glob(os.path.join(out, "part-*.parquet")))}  # fmt: skip


def _store_parts(out: str) -> dict[str, bytes]:
    return {fs.basename(p): fs.read_bytes(p) for p in committed_parts(out)}


def _keys(prefix: str) -> list[str]:
    return sorted(os.path.join(h, n)[len(prefix) + 1 :] for h, _, ns in fs.walk(prefix)
                  for n in ns)  # fmt: skip


def test_paths_on_the_store_follow_the_local_rules(s3, local_src):
    base = "s3://mass-test/paths"
    for name in ("a/p1.parquet", "a/p2.parquet", "a/_tmp/p3.parquet", "a/.x.parquet",
                 "lit[1].parquet", "lit1.parquet"):  # fmt: skip
        _upload(local_src, f"{base}/{name}")
    assert expand_paths(f"{base}/a") == [f"{base}/a/p1.parquet", f"{base}/a/p2.parquet"]
    assert expand_paths(f"{base}/a/p[12].parquet") == [f"{base}/a/p1.parquet",
                                                         f"{base}/a/p2.parquet"]  # fmt: skip
    assert expand_paths(f"{base}/**/*.parquet")[:2] == [f"{base}/a/p1.parquet",
                                                        f"{base}/a/p2.parquet"]  # fmt: skip
    assert expand_paths(f"{base}/lit[1].parquet") == [f"{base}/lit[1].parquet"]  # literal
    assert read_table(f"{base}/a").num_rows == 2000


def test_a_release_on_the_store_is_byte_identical_to_the_local_one(s3, local_src, tmp_path):
    _run(local_src, str(tmp_path / "rel"), "--shards", "3", "--batch-rows", "128")
    src = _upload(local_src, "s3://mass-test/in1/emb.parquet")
    out = "s3://mass-test/out1/rel"
    summary = _run(src, out, "--shards", "3", "--batch-rows", "128")
    assert summary["rows_out"] == 1000
    assert _store_parts(out) == _local_parts(str(tmp_path / "rel"))
    keys = _keys(out)
    (version,) = {k.split("/")[1] for k in keys if k.startswith(VERSIONS)}
    assert keys == ["_release.json"] + [f"{VERSIONS}/{version}/{n}" for n in
                                        ("_RELEASE.md", "_release.json",
                                         *sorted(_local_parts(str(tmp_path / "rel"))))]  # fmt: skip
    doc = fs.read_json(f"{out}/_release.json")
    assert doc["version"] == f"{VERSIONS}/{version}" and doc["rows"] == 1000
    # readers resolve the pointer; the quarantine is committed the same way
    assert sorted(read_table(out).column("id").to_pylist()) == list(range(1000))
    assert fs.read_json(f"{out}_quarantine/_quarantine.json")["rows"] == 0
    # a second run commits a new version, then (only then) drops the previous one
    _run(src, out, "--shards", "3", "--batch-rows", "500")
    again = {k.split("/")[1] for k in _keys(out) if k.startswith(VERSIONS)}
    assert len(again) == 1 and again != {version}
    assert _store_parts(out) == _local_parts(str(tmp_path / "rel"))
    assert not [k for k in _keys("s3://mass-test/out1") if "/_spills/" in k or "_ids" in k]


def test_a_failed_job_leaves_the_previous_release_readable(s3, local_src):
    src = _upload(local_src, "s3://mass-test/in2/emb.parquet")
    out = "s3://mass-test/out2/rel"
    _run(src, out, "--shards", "2")
    before = fs.read_bytes(f"{out}/_release.json")
    with pytest.raises(ReleaseError, match="equal their input"):
        _run(src, out, "--shards", "2", load=Bypass())
    assert fs.read_bytes(f"{out}/_release.json") == before
    assert read_table(out).num_rows == 1000
    assert len({k.split("/")[1] for k in _keys(out) if k.startswith(VERSIONS)}) == 1


def test_a_prefix_holding_foreign_objects_is_never_replaced(s3, local_src):
    src = _upload(local_src, "s3://mass-test/in3/emb.parquet")
    fs.write_bytes("s3://mass-test/theirs/data.csv", b"a,b\n")
    with pytest.raises(OutputPathError, match="no _release.json pointer"):
        _run(src, "s3://mass-test/theirs")
    with pytest.raises(OutputPathError, match="the input"):
        _run(src, "s3://mass-test/in3")
    assert fs.read_bytes("s3://mass-test/theirs/data.csv") == b"a,b\n"


@pytest.mark.slow
def test_two_worker_dask_cluster_on_the_store_matches_the_local_run(s3, local_src, tmp_path):
    """Scheduler and 2 workers as separate processes, each worker with its own working and
    scratch directory; everything the job reads or writes is in the store. Each worker traces
    every file it opens (MASS_FS_TRACE): all are s3:// URIs, so no worker reads a local path
    of another (or its own: the workers share nothing but the store)."""
    src, local = "s3://mass-test/in4", tmp_path / "in"
    local.mkdir()
    for i in range(6):  # one work item per file: both workers get some
        write_embeddings(str(local / f"p{i}.parquet"), rows=500, dim=16, id_offset=500 * i)
        _upload(str(local / f"p{i}.parquet"), f"{src}/p{i}.parquet")
    _run(str(local), str(tmp_path / "local"), "--shards", "3", "--batch-rows", "128")
    with dask_cluster(str(tmp_path / "cluster"), 2, trace=True) as address:
        out = "s3://mass-test/out4/rel"
        summary = _run(src, out, "--shards", "3", "--batch-rows", "128", "--runner=DaskRunner",
                       f"--dask_client_address={address}",
                       "--temp_location=s3://mass-test/tmp4")  # fmt: skip
        assert summary["rows_out"] == 3000
        assert _store_parts(out) == _local_parts(str(tmp_path / "local"))
        traces = glob.glob(str(tmp_path / "cluster" / "w*" / "trace.log"))
        opened = [open(t).read().split() for t in traces]
        paths = [p for lines in opened for p in lines[1::2]]
        assert len(opened) == 2 and all(lines for lines in opened), "both workers did work"
        assert paths and all(p.startswith("s3://mass-test/") for p in paths), paths[:5]
        # nothing of the job was left in a worker's own directories
        left = [os.path.join(h, n) for h, _, ns in os.walk(tmp_path / "cluster") for n in ns
                if n.endswith((".arrow", ".parquet"))]  # fmt: skip
        assert left == []


@pytest.mark.slow
def test_dvc_pushes_to_the_same_store(s3, tmp_path):
    if shutil.which("dvc", path=BIN) is None:
        pytest.skip("dvc not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}

    def sh(*cmd):
        subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)

    sh("git", "init", "-q")
    sh(os.path.join(BIN, "dvc"), "init", "-q")
    write_embeddings(str(repo / "data.parquet"), rows=50, dim=4)
    sh(os.path.join(BIN, "dvc"), "add", "-q", "data.parquet")
    sh(os.path.join(BIN, "dvc"), "remote", "add", "-d", "store", "s3://mass-test/dvc")
    sh(os.path.join(BIN, "dvc"), "remote", "modify", "store", "endpointurl",
       s3["AWS_ENDPOINT_URL"])  # fmt: skip
    sh(os.path.join(BIN, "dvc"), "push", "-q")
    pushed = [k for k in _keys("s3://mass-test/dvc")]
    assert len(pushed) == 1
    with open(repo / "data.parquet", "rb") as f:
        assert fs.read_bytes(f"s3://mass-test/dvc/{pushed[0]}") == f.read()
    assert pq.read_table(repo / "data.parquet").num_rows == 50


KILLED_JOB = """
import sys
from beam_pipelines import anonymize
from mass.testing.stand_ins import NumpyModifier
from transforms.inference.function import FunctionModelHandler
info = {"name": "np", "version": 3, "sha256": "abc", "method": "test", "suppress": ["digit"],
        "preserve": [], "config_hash": "h", "dim": 16}
h = FunctionModelHandler(NumpyModifier(), output_dim=16, keep_input_as=anonymize.INPUT_COPY)
anonymize.run(["--input", sys.argv[1], "--output", sys.argv[2], "--model", "np", "--no-audit",
               "--shards", "2", "--batch-rows", sys.argv[3]], model_handler=h, model_info=info)
"""


@pytest.mark.parametrize("point", ["before-swap", "after-swap"])
@pytest.mark.slow
def test_a_job_killed_at_the_commit_leaves_one_whole_release(s3, local_src, point):
    """SIGKILL right before the pointer PUT: the previous release, byte for byte; right after
    it: the whole new one. The next run clears the dead job's version and matches a clean run."""
    from mass.release.commit import KILL_AT_ENV

    src = _upload(local_src, f"s3://mass-test/in5-{point}/emb.parquet")
    out = f"s3://mass-test/out5-{point}/rel"
    _run(src, out, "--shards", "2", "--batch-rows", "100")
    before = (fs.read_bytes(f"{out}/_release.json"), _store_parts(out))
    env = {**os.environ, KILL_AT_ENV: point, "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-c", KILLED_JOB, src, out, "700"], env=env,
                          capture_output=True, timeout=300)  # fmt: skip
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    versions = {k.split("/")[1] for k in _keys(out) if k.startswith(VERSIONS)}
    # before the commit the dead job's release is still in its private scratch, never under
    # the prefix; after it, the previous version is still there (dropped after the pointer)
    assert len(versions) == (1 if point == "before-swap" else 2)
    pointer = fs.read_bytes(f"{out}/_release.json")
    if point == "before-swap":
        assert (pointer, _store_parts(out)) == before
    else:  # committed: the new pointer names a whole version (same bytes: same rows)
        assert pointer != before[0] and _store_parts(out) == before[1]
    assert read_table(out).num_rows == 1000
    _run(src, out, "--shards", "2")  # the next run clears the dead job's leftovers
    assert len({k.split("/")[1] for k in _keys(out) if k.startswith(VERSIONS)}) == 1
    assert _store_parts(out) == before[1]


def test_temp_location_holds_the_spills(s3, local_src, tmp_path, monkeypatch):
    """--temp_location (Beam's flag) moves the spills into the store (the job's private
    scratch there, ``mass-job-*``); the job removes them; the release is the same bytes."""
    _run(local_src, str(tmp_path / "plain"), "--shards", "2", "--batch-rows", "100")
    trace = tmp_path / "trace.log"
    monkeypatch.setenv(fs.TRACE_ENV, str(trace))
    _run(local_src, str(tmp_path / "rel"), "--shards", "2", "--batch-rows", "100",
         "--temp_location=s3://mass-test/tmp")  # fmt: skip
    written = [
        p
        for line in trace.read_text().splitlines()
        for p in [line.split(" ", 1)[1]]
        if line.startswith("w ") and "/_spills/spill-" in p and "/_ids/" not in p
    ]  # fmt: skip (the id index is built by the launcher)
    assert written and all(p.startswith("s3://mass-test/tmp/mass-job-") for p in written)
    assert _keys("s3://mass-test/tmp") == []
    assert _local_parts(str(tmp_path / "rel")) == _local_parts(str(tmp_path / "plain"))
