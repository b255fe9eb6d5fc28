"""anonymize / extract on the real tritonserver (FnApiRunner, and DaskRunner for the slow test)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from beam_pipelines import anonymize, extract

pytestmark = pytest.mark.triton
DIM = 16


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A repository with a stochastic DataModifier (16-d) and a tiny random extractor."""
    from mass.demo.extractor import EncoderConfig, ImageEncoder, save_extractor
    from mass.modifiers import DataModifier, ModifierSpec, save_modifier
    from mass.serving.export import export_extractor, export_modifier

    base = tmp_path_factory.mktemp("triton")
    torch.manual_seed(0)
    run = base / "run"
    run.mkdir()
    save_modifier(
        DataModifier(ModifierSpec(DIM, hidden=(32,), noise_dim=4)),
        str(run / "modifier.pt"),
        method="mass",
        suppress=["digit"],
        preserve=[],
        config_hash="h1",
    )
    export_modifier(run, base / "repo", "mod", max_batch_size=512)
    save_extractor(ImageEncoder(EncoderConfig(widths=(4, 8, 8))), str(base / "extractor.pt"))
    export_extractor(base / "extractor.pt", base / "repo", "mnist_cnn")
    return base


@pytest.fixture(scope="module")
def emb_input(repo):
    from mass.testing.stand_ins import write_embeddings

    path = str(repo / "emb.parquet")
    write_embeddings(path, rows=2000, dim=DIM, row_group=700, nan_rows=(5,))
    return path


def _bytes(out):
    return {
        os.path.basename(f): open(f, "rb").read()
        for f in sorted(glob.glob(os.path.join(out, "*.parquet")))
    }


@pytest.mark.slow
def test_anonymize_on_a_local_server_matches_the_in_process_modifier(repo, emb_input, tmp_path):
    from mass.keys import NOISE_KEY_ENV, resolve_key
    from mass.modifiers import load_modifier
    from mass.noise import release_row_seeds

    out = str(tmp_path / "release")
    summary = anonymize.run(
        [
            "--input",
            emb_input,
            "--output",
            out,
            "--model",
            "mod",
            "--repository",
            str(repo / "repo"),
            "--shards",
            "2",
            "--batch-rows",
            "700",
            "--max-quarantined",
            "1",
            "--no-audit",
        ]
    )
    assert (summary["rows_in"], summary["rows_out"], summary["quarantined"]) == (2000, 1999, 1)
    rel = pq.read_table(out).sort_by("id")
    src = pq.read_table(emb_input)
    expected_ids = [i for i in range(2000) if i != 5]
    assert rel.column("id").to_pylist() == expected_ids
    assert rel.column_names == ["id", "emb"]  # the digit label does not leak
    meta = rel.schema.metadata
    sha = open(glob.glob(str(repo / "repo/mod/1/export.json"))[0]).read()
    assert meta[b"mass.sha256"].decode() in sha and meta[b"mass.model"] == b"mod"
    x = np.stack(src.take(pa.array(expected_ids)).column("emb").to_numpy(zero_copy_only=False))
    key = resolve_key(None, NOISE_KEY_ENV)  # the session key (tests/conftest.py) seeded the job
    assert meta[b"mass.noise_key_fingerprint"] == key.fingerprint.encode()
    model = load_modifier(str(repo / "run" / "modifier.pt"))
    with torch.no_grad():
        ref = model(
            torch.from_numpy(x.astype(np.float32)),
            seeds=torch.from_numpy(release_row_seeds(rel.column("id"), key, meta)),
        ).numpy()
    got = np.stack(rel.column("emb").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, ref, atol=1e-5)


@pytest.fixture(scope="module")
def server(repo, triton_server_factory):
    return triton_server_factory(repo / "repo")


@pytest.mark.slow
def test_extract_on_triton_matches_the_in_process_extractor(repo, server, tmp_path):
    from mass.demo.extractor import load_extractor

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(300, 2352), dtype=np.uint8)
    src = str(tmp_path / "raw.parquet")
    pq.write_table(
        pa.table(
            {
                "id": pa.array(np.arange(300, dtype=np.int64)),
                "image": pa.FixedSizeListArray.from_arrays(pa.array(images.ravel()), 2352),
                "digit": pa.array(rng.integers(0, 10, 300)),
            }
        ),
        src,
    )
    out = str(tmp_path / "features")
    extract.run(
        [
            "--input",
            src,
            "--output",
            out,
            "--model",
            "mnist_cnn",
            "--raw-col",
            "image",
            "--keep-columns",
            "digit",
            "--triton-url",
            server.grpc_url,
            "--batch-rows",
            "128",
        ]
    )
    feats = pq.read_table(out).sort_by("id")
    assert feats.column_names == ["id", "emb", "digit"]  # the raw image is not copied
    # the version served, not "latest" (export_extractor wrote version 1)
    assert feats.schema.metadata[b"mass.extractor_version"] == b"1"
    with torch.no_grad():
        ref = load_extractor(str(repo / "extractor.pt"))(torch.from_numpy(images)).numpy()
    got = np.stack(feats.column("emb").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, ref, atol=1e-5)


@pytest.mark.slow
def test_dask_runner_output_is_byte_identical_to_fnapi(repo, server, emb_input, tmp_path):
    from dask.distributed import LocalCluster

    flags = [
        "--input",
        emb_input,
        "--model",
        "mod",
        "--repository",
        str(repo / "repo"),
        "--triton-url",
        server.grpc_url,
        "--shards",
        "3",
        "--batch-rows",
        "256",
        "--max-quarantined",
        "1",
        "--no-audit",
    ]
    anonymize.run([*flags, "--output", str(tmp_path / "fnapi")])
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        summary = anonymize.run(
            [
                *flags,
                "--output",
                str(tmp_path / "dask"),
                "--runner=DaskRunner",
                f"--dask_client_address={cluster.scheduler_address}",
            ]
        )
    assert (summary["rows_out"], summary["quarantined"]) == (1999, 1)
    a, b = _bytes(str(tmp_path / "fnapi")), _bytes(str(tmp_path / "dask"))
    assert len(a) == 3 and a == b
    assert _bytes(str(tmp_path / "fnapi_quarantine")) == _bytes(str(tmp_path / "dask_quarantine"))


def test_shared_memory_and_grpc_payloads_give_byte_identical_releases(
    repo, server, emb_input, tmp_path
):
    """--triton-shm on (regions registered per request thread) == off (gRPC payloads); with
    it on, every released row's tensors went through shared memory (the handler's count of
    shm bytes is exactly the rows' input + output bytes), with it off none did; no region
    outlives the job, on the client (/dev/shm) or in the server's registry."""
    import tritonclient.grpc as grpcclient

    from mass.serving.shm import SHM_PREFIX
    from mass.serving.triton_client import TritonClient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    mine = f"{SHM_PREFIX}-{os.getpid()}-"

    def registered() -> set[str]:
        status = client.get_system_shared_memory_status(as_json=True,
                                                        headers=server.client_headers)  # fmt: skip
        status = status.get("regions", {})
        return {n for n in status if n.startswith(mine)}

    # other jobs of this process (extract's RunInference keeps its client for the process
    # lifetime) may hold regions; the anonymize jobs below must add none that outlive them
    before = registered()
    before_files = {f for f in os.listdir("/dev/shm") if f.startswith(mine)}
    outs, sent = {}, {}
    for mode in ("on", "off"):
        outs[mode] = str(tmp_path / mode)
        start = dict(TritonClient.shm_sent)
        summary = anonymize.run(["--input", emb_input, "--output", outs[mode], "--model",
                                 "mod", "--repository", str(repo / "repo"), "--triton-url",
                                 server.grpc_url, "--triton-shm", mode, "--batch-rows", "700",
                                 "--max-quarantined", "1", "--no-audit"])  # fmt: skip
        sent[mode] = {k: TritonClient.shm_sent[k] - start[k] for k in start}
    assert _bytes(outs["on"]) == _bytes(outs["off"])
    rows = summary["rows_out"]
    assert rows == 1999
    # per row: float32 embedding + int64 seed in, float32 embedding out
    assert sent["on"]["bytes"] == rows * (4 * DIM + 8 + 4 * DIM), sent
    # several batches of two requests each (max_batch_size 512), each response copied
    # into its rows of the batch's result; all through shm
    assert sent["on"]["requests"] == 2 * -(-2000 // 700), sent
    assert sent["off"] == {"requests": 0, "bytes": 0}, sent
    assert registered() <= before
    assert {f for f in os.listdir("/dev/shm") if f.startswith(mine)} <= before_files


@pytest.mark.slow
def test_extract_then_anonymize_on_a_two_worker_cluster_and_object_store(repo, server, tmp_path):
    """Both jobs through the real tritonserver, run by Beam's DaskRunner on a
    dask.distributed cluster of a scheduler and 2 worker processes (each with its own working
    and scratch directory) reading and writing an S3-compatible store (moto's server): the
    features and the release equal, byte for byte, the local FnApiRunner runs on local disk,
    and every file a worker opened was an s3:// object (no local path crosses the shuffle)."""
    from mass import fs
    from mass.formats import committed_parts
    from mass.testing.services import dask_cluster, moto_s3

    rng = np.random.default_rng(1)
    local = tmp_path / "raw"
    local.mkdir()
    for i in range(4):  # one work item per file: both workers get some
        n = 250
        images = rng.integers(0, 256, size=(n, 2352), dtype=np.uint8)
        pq.write_table(pa.table({
            "id": pa.array(np.arange(i * n, (i + 1) * n, dtype=np.int64)),
            "image": pa.FixedSizeListArray.from_arrays(pa.array(images.ravel()), 2352),
            "digit": pa.array(rng.integers(0, 10, n)),
        }), str(local / f"p{i}.parquet"))  # fmt: skip

    def extract_flags(src, out):
        return ["--input", src, "--output", out, "--model", "mnist_cnn", "--raw-col", "image",
                "--keep-columns", "digit", "--triton-url", server.grpc_url, "--shards", "2",
                "--batch-rows", "100"]  # fmt: skip

    def anonymize_flags(src, out):
        return ["--input", src, "--output", out, "--model", "mod", "--repository",
                str(repo / "repo"), "--triton-url", server.grpc_url, "--shards", "3",
                "--batch-rows", "128", "--no-audit"]  # fmt: skip

    # local reference: FnApiRunner on local disk
    extract.run(extract_flags(str(local), str(tmp_path / "feat")))
    emb_src = tmp_path / "emb"
    emb_src.mkdir()
    from mass.testing.stand_ins import write_embeddings

    for i in range(3):
        write_embeddings(str(emb_src / f"e{i}.parquet"), rows=400, dim=DIM, id_offset=400 * i)
    anonymize.run(anonymize_flags(str(emb_src), str(tmp_path / "rel")))

    with moto_s3(str(tmp_path), "cluster") as _:
        for d in (local, emb_src):
            for p in sorted(d.iterdir()):
                fs.write_bytes(f"s3://cluster/{d.name}/{p.name}", p.read_bytes())
        with dask_cluster(str(tmp_path / "cluster"), 2, trace=True) as address:
            dask = ["--runner=DaskRunner", f"--dask_client_address={address}"]
            extract.run([*extract_flags("s3://cluster/raw", "s3://cluster/feat"), *dask])
            summary = anonymize.run([*anonymize_flags("s3://cluster/emb", "s3://cluster/rel"),
                                     *dask, "--temp_location=s3://cluster/tmp"])  # fmt: skip
            assert summary["rows_out"] == 1200
            for name in ("feat", "rel"):
                mine = {fs.basename(p): fs.read_bytes(p)
                        for p in committed_parts(f"s3://cluster/{name}")}  # fmt: skip
                assert mine and mine == _bytes(str(tmp_path / name)), name
            traces = sorted((tmp_path / "cluster").glob("w*/trace.log"))
            opened = [t.read_text().split()[1::2] for t in traces]
            assert len(opened) == 2 and all(opened), "both workers did work"
            paths = [p for ps in opened for p in ps]
            assert all(p.startswith("s3://cluster/") for p in paths), paths[:5]
