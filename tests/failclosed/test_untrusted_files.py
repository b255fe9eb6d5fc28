"""Never run a file we did not write, never serve an export the owner did not sign, and keep
the local server to the job that started it (issue 11, items 2, 3 and 6).

* A crafted pickle (its ``__reduce__`` creates a marker file) placed as modifier.pt,
  branches.pt, a training checkpoint or an extractor checkpoint is refused with
  :class:`UnreadableInputError` by ``mass export``, ``mass audit --run-dir``, ``load_modifier``
  and ``mass train --resume``; the marker never appears (and does appear when the same file is
  loaded with the full unpickler, so the file is live).
* A tampered version folder (weights re-hashed into SHA256SUMS, an unlisted file, a shim picked
  through config.pbtxt, an edited config, another key's signature, no signature, a moved
  version) is refused by the job before any work and by :class:`TritonServer` before launching
  (staging); the served model refuses a staged copy changed after staging (no key in the stub).
* The server's shared-memory and model-control APIs refuse a client without the job's header;
  every shared-memory region is 0600 with an unpredictable name; the work directory is gone
  after a failed start and after SIGTERM.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from mass import errors as E
from mass.keys import OwnerKey
from mass.serving import TritonServer, free_port
from mass.serving.contract import SHA256SUMS, SIGNATURE
from mass.serving.manifest import (
    manifest_names,
    sign_version_dir,
    verify_version_dir,
    write_sha256sums,
)

DIM = 16


class Boom:
    """Unpickling this calls ``open(marker, "w")``: code from the file runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _crafted(path: Path, marker: Path, *, raw: bool = False, **fields) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {**fields, "meta": Boom(marker)}
    if raw:  # a plain (non-zip) pickle stream, as pickle.dump writes it
        with open(path, "wb") as f:
            pickle.dump(blob, f)
    else:
        torch.save(blob, path)
    return path


def _modifier_fields() -> dict:
    from mass.modifiers import DataModifier, ModifierSpec

    model = DataModifier(ModifierSpec(DIM, hidden=(8,)))
    return {"kind": "mass", "spec": model.spec.to_dict(), "state_dict": model.state_dict()}


def test_the_crafted_file_is_live(tmp_path):
    """Control: the full unpickler does run it (so the refusals below mean something)."""
    marker = tmp_path / "ran"
    path = _crafted(tmp_path / "modifier.pt", marker, **_modifier_fields())
    torch.load(path, weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("raw", [False, True], ids=["torch-zip", "raw-pickle"])
def test_crafted_modifier_never_runs_in_export_or_load(tmp_path, fc, raw):
    from mass.modifiers import load_modifier, modifier_meta

    marker = tmp_path / "ran"
    run = tmp_path / "run"
    weights = _crafted(run / "modifier.pt", marker, raw=raw, **_modifier_fields())
    repo = tmp_path / "repo"
    with pytest.raises(E.UnreadableInputError, match=r"modifier\.pt.*pickle.*mass train"):
        fc.mass_command(["export", str(run), "--repository", str(repo), "--name", "m"])
    assert not list(repo.glob("m/[0-9]*"))  # nothing exported
    for load in (load_modifier, modifier_meta):
        with pytest.raises(E.UnreadableInputError, match="modifier.pt"):
            load(str(weights))
    assert not marker.exists()


def test_crafted_branches_never_run_in_audit(tmp_path, fc):
    """A real (unmodified) release and its labels, so the audit reaches the run directory's
    branch judges, which it must refuse to unpickle."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mass.embeddings import embedding_array

    marker = tmp_path / "ran"
    run = tmp_path / "run"
    _crafted(run / "branches.pt", marker, classifiers={}, agnostic=None)
    rng = np.random.default_rng(0)
    ids = np.arange(64, dtype=np.int64)
    (tmp_path / "release").mkdir()
    pq.write_table(
        pa.table({"id": ids, "emb": embedding_array(rng.normal(size=(64, 8)).astype(np.float32))}),
        tmp_path / "release" / "part-0.parquet",
    )
    pq.write_table(pa.table({"id": ids, "digit": rng.integers(0, 2, 64)}),
                   tmp_path / "labels.parquet")  # fmt: skip
    argv = ["audit", "--release", str(tmp_path / "release"), "--labels",
            str(tmp_path / "labels.parquet"), "--suppress", "digit", "--report",
            str(tmp_path / "report"), "--run-dir", str(run)]  # fmt: skip
    with pytest.raises(E.UnreadableInputError, match=r"branches\.pt.*pickle"):
        fc.mass_command(argv)
    assert not marker.exists() and not (tmp_path / "report").exists()


def test_crafted_checkpoint_never_runs_on_resume(tmp_path, fc):
    import yaml

    from mass.synthetic import write_synthetic

    write_synthetic(str(tmp_path / "train.parquet"), n=64, dim=8, seed=0)
    params = {"train": {"epochs": 2, "branch_epochs": 1, "agnostic_epochs": 1, "batch_size": 32,
                        "modifier": {"hidden": [8]}, "suppress": ["s"]}}  # fmt: skip
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    marker, out = tmp_path / "ran", tmp_path / "run"
    _crafted(out / "checkpoint.pt", marker, epoch=0, config_hash="x")
    argv = ["train", "--data", str(tmp_path / "train.parquet"), "--preserve", "u",
            "--config", str(tmp_path / "params.yaml"), "--out", str(out), "--resume",
            "--no-progress"]  # fmt: skip
    with pytest.raises(E.UnreadableInputError, match=r"checkpoint\.pt.*pickle"):
        fc.mass_command(argv)
    assert not marker.exists() and not (out / "modifier.pt").exists()


def test_crafted_extractor_never_runs_in_export(tmp_path, fc):
    marker = tmp_path / "ran"
    ckpt = _crafted(tmp_path / "extractor.pt", marker, kind="mnist_cnn", config={})
    with pytest.raises(E.UnreadableInputError, match=r"extractor\.pt.*pickle"):
        fc.mass_command(["export", str(ckpt), "--kind", "extractor", "--repository",
                         str(tmp_path / "repo"), "--name", "cnn"])  # fmt: skip
    assert not marker.exists()


# -- authentic exports ---------------------------------------------------------------------------
def _resign_sums(vdir: Path) -> None:
    """What an attacker without the key can do: recompute SHA256SUMS (the old .sig stays)."""
    write_sha256sums(vdir, manifest_names(vdir))


def _rehashed_weights(vdir: Path) -> None:
    weights = vdir / "modifier.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    from mass.digest import sha256_file

    meta = json.loads((vdir / "export.json").read_text())
    meta["sha256"] = sha256_file(weights)
    (vdir / "export.json").write_text(json.dumps(meta))
    _resign_sums(vdir)


def _crafted_weights(vdir: Path) -> None:
    """A code-running pickle as the weights, re-hashed everywhere (the key is not at hand)."""
    from mass.digest import sha256_file

    weights = vdir / "modifier.pt"
    _crafted(weights, vdir.parent.parent / "ran", **_modifier_fields())
    meta = json.loads((vdir / "export.json").read_text())
    meta["sha256"] = sha256_file(weights)
    (vdir / "export.json").write_text(json.dumps(meta))
    _resign_sums(vdir)


def _unlisted_file(vdir: Path) -> None:
    (vdir / "shim.py").write_text("from mass.serving.adapters.modifier import *\n")


def _shim_via_config(vdir: Path) -> None:
    _unlisted_file(vdir)
    config = vdir.parent / "config.pbtxt"
    config.write_text(config.read_text() + 'default_model_filename: "shim.py"\n')


def _edited_config(vdir: Path) -> None:
    config = vdir.parent / "config.pbtxt"
    text = config.read_text()
    assert "max_queue_delay_microseconds: 2000" in text
    config.write_text(text.replace("max_queue_delay_microseconds: 2000",
                                   "max_queue_delay_microseconds: 5000"))  # fmt: skip


def _other_key(vdir: Path) -> None:
    sign_version_dir(vdir, OwnerKey.generate())


def _unsigned(vdir: Path) -> None:
    (vdir / SIGNATURE).unlink()


def _moved_version(vdir: Path) -> None:
    vdir.rename(vdir.parent / "2")


TAMPER = {  # case -> (tamper, what the error names)
    "rehashed-weights": (_rehashed_weights, "signature does not match"),
    "crafted-weights": (_crafted_weights, "signature does not match"),
    "unlisted-file": (_unlisted_file, "shim.py not listed"),
    "shim-via-config": (_shim_via_config, "config.pbtxt: content differs"),
    "edited-config": (_edited_config, "config.pbtxt: content differs"),
    "other-key": (_other_key, "signed with another key"),
    "unsigned": (_unsigned, "unsigned export"),
    "moved-version": (_moved_version, "signature does not match"),
}


def _tampered_repo(tmp_path: Path, fc, case: str, name: str = "mod") -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / f"run_{name}", repo, seed=0, name=name)
    vdir = repo / name / "1"
    verify_version_dir(vdir)  # sound before the tamper
    TAMPER[case][0](vdir)
    return repo, next(p for p in (repo / name).iterdir() if p.name.isdigit())


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_tampered_export_is_refused_by_the_job_before_any_work(case, tmp_path, fc):
    repo, vdir = _tampered_repo(tmp_path, fc, case)
    with pytest.raises(E.ChecksumMismatchError, match=TAMPER[case][1]):
        verify_version_dir(vdir)
    src = tmp_path / "in.parquet"
    fc.write_input(src)
    before = fc.snapshot(tmp_path / "repo")
    out = tmp_path / "release"
    # a closed port: a job that went past its up-front check would fail with another error
    argv = ["anonymize", "--input", str(src), "--output", str(out), "--model", "mod",
            "--repository", str(repo), "--triton-url", f"127.0.0.1:{free_port()}"]  # fmt: skip
    # moved-version: the job verifies the folder that export.json names (1), now missing
    expected = "1/export.json: missing" if case == "moved-version" else TAMPER[case][1]
    with pytest.raises(E.ChecksumMismatchError, match=expected):
        fc.mass_command(argv)
    assert not out.exists() and fc.leftovers(out) == []
    assert fc.snapshot(tmp_path / "repo") == before
    assert not (repo / "ran").exists()


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_tampered_export_is_refused_before_the_server_launches(case, tmp_path, fc):
    repo, _ = _tampered_repo(tmp_path, fc, case)
    server = TritonServer(repo)
    with pytest.raises(E.ChecksumMismatchError, match=TAMPER[case][1]):
        server.start()
    assert server.process is None and server._workdir is None


def test_export_and_verification_need_the_owner_key(tmp_path, fc, monkeypatch):
    fc.export_mod(tmp_path / "run", tmp_path / "repo", seed=0)
    monkeypatch.delenv("MASS_SIGNING_KEY_FILE")
    with pytest.raises(E.ConfigError, match="MASS_SIGNING_KEY_FILE"):
        verify_version_dir(tmp_path / "repo" / "mod" / "1")
    with pytest.raises(E.ConfigError, match="--signing-key-file"):
        fc.mass_command(["export", str(tmp_path / "run"), "--repository",
                         str(tmp_path / "repo"), "--name", "mod2"])  # fmt: skip
    assert not (tmp_path / "repo" / "mod2").exists()


def test_an_older_version_is_signed_again_over_the_new_config(tmp_path, fc):
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "a", repo, seed=0)
    fc.export_mod(tmp_path / "b", repo, seed=1)  # rewrites config.pbtxt (mass_sha256_v2)
    for v in ("1", "2"):
        verify_version_dir(repo / "mod" / v)
        listed = (repo / "mod" / v / SHA256SUMS).read_text()
        assert "  ../config.pbtxt\n" in listed and "  modifier.pt\n" in listed
    subprocess.run(["sha256sum", "--quiet", "-c", SHA256SUMS], cwd=repo / "mod" / "1", check=True)


# -- the served model checks its staged copy again (no key in the stub) ---------------------------
SERVED = {  # tamper of the staged copy -> what the adapter's initialize names
    "rehashed-weights": "content differs",
    "crafted-weights": "content differs",
    "unlisted-file": "shim.py not listed",
    "edited-config": "config.pbtxt: content differs",
}


@pytest.mark.triton
@pytest.mark.slow
def test_the_served_model_refuses_a_staged_copy_changed_after_staging(tmp_path, fc):
    """The job verifies with the key, then writes the verified digests into its private copy;
    the adapter checks that copy against them in ``initialize`` (no key in the stub), so files
    changed between staging and loading are refused."""
    from tritonclient.utils import InferenceServerException

    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "run_good", repo, seed=0, name="good")
    for case in SERVED:
        fc.export_mod(tmp_path / f"run_{case}", repo, seed=0, name=case.replace("-", "_"))
    with TritonServer(repo, model_control="explicit", load_models=(),
                      startup_timeout=300) as server:  # fmt: skip
        import tritonclient.grpc as grpcclient

        for case in SERVED:
            TAMPER[case][0](server.staged_repository / case.replace("-", "_") / "1")
        client = grpcclient.InferenceServerClient(server.grpc_url)
        client.load_model("good", headers=server.client_headers)  # control: a signed one loads
        assert client.is_model_ready("good")
        for case, message in SERVED.items():
            with pytest.raises(InferenceServerException, match=message):
                client.load_model(case.replace("-", "_"), headers=server.client_headers)
            assert not client.is_model_ready(case.replace("-", "_"))
        client.close()
        assert not list(server.staged_repository.rglob("ran"))  # crafted weights never ran


# -- the local server belongs to the job that started it -------------------------------------------


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.triton
def test_restricted_apis_and_private_shared_memory(tiny_repo, monkeypatch):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    from mass.serving.shm import SHM_PREFIX, ShmSlot

    with TritonServer(tiny_repo, model_control="explicit") as server:
        stranger = grpcclient.InferenceServerClient(server.grpc_url)
        job = grpcclient.InferenceServerClient(server.grpc_url)
        h = server.client_headers
        refused = [
            lambda **k: stranger.register_system_shared_memory("x", "/mass-x", 64, **k),
            lambda **k: stranger.unregister_system_shared_memory(**k),
            lambda **k: stranger.get_system_shared_memory_status(**k),
            lambda **k: stranger.unload_model("double", **k),
            lambda **k: stranger.load_model("double", **k),
            lambda **k: stranger.get_model_repository_index(**k),
        ]
        for call in refused:
            with pytest.raises(InferenceServerException, match="restricted"):
                call()
            with pytest.raises(InferenceServerException, match="restricted"):
                call(headers={"triton-grpc-protocol-mass-access-token": "0" * 64})
        with pytest.raises(InferenceServerException, match="restricted"):
            httpclient.InferenceServerClient(server.http_url).get_system_shared_memory_status()
        assert stranger.is_model_ready("double")  # health and inference stay open
        job.unload_model("double", headers=h)
        job.load_model("double", headers=h)
        # the job's own regions: 0600, unpredictable names, registered with its header
        slots = [ShmSlot(job, 1 << 16, 1 << 16, h) for _ in range(2)]
        names = [s.in_name for s in slots] + [s.out_name for s in slots]
        assert len({n.split("-")[3] for n in names}) == 2  # a fresh random token per slot
        assert all(len(n.split("-")[3]) == 16 for n in names)
        assert all(n.startswith(f"{SHM_PREFIX}-{os.getpid()}-") for n in names)
        assert all(_mode(f"/dev/shm/{n}") == 0o600 for n in names)
        status = job.get_system_shared_memory_status(as_json=True, headers=h)["regions"]
        assert set(names) <= set(status)
        for s in slots:
            s.close(job, h)
        # the python backend's own regions (raw request tensors): 0600 too, random prefix
        regions = list(Path("/dev/shm").glob(f"{server._shm_prefix}*"))
        assert regions and all(_mode(r) == 0o600 for r in regions)
        assert str(os.getpid()) not in server._shm_prefix
        # a job's connection: with the header it uses shared memory; without, "auto" falls
        # back to gRPC payloads and "on" is a clear error
        from mass.serving import client_headers, write_access_file
        from mass.serving.triton_client import TritonClient

        assert client_headers(server.grpc_url) == h  # what TritonModelHandler picks up
        conns = [TritonClient(server.grpc_url, "double", "", shared_memory=m, headers=hd)
                 for m, hd in (("auto", h), ("auto", {}))]  # fmt: skip
        assert [c.shm for c in conns] == [True, False]
        with pytest.raises(E.ServingError, match="shared memory refused.*MASS_TRITON_ACCESS_FILE"):
            TritonClient(server.grpc_url, "double", "", shared_memory=True, headers={})
        for c in conns:
            c.close()
        stranger.close()
        job.close()
        # another process of this user (`mass serve` + --triton-url): the access file
        access = tiny_repo.parent / "access"
        write_access_file(access, server._token)
        assert _mode(access) == 0o600
        monkeypatch.setenv("MASS_TRITON_ACCESS_FILE", str(access))
        assert client_headers(f"127.0.0.1:{free_port()}") == h
        os.chmod(access, 0o644)
        with pytest.raises(E.ServingError, match="chmod 600"):
            client_headers(f"127.0.0.1:{free_port()}")


@pytest.mark.triton
def test_a_failed_start_leaves_no_work_directory(
    tiny_repo, tmp_path, monkeypatch, sign_handmade_model
):
    (tiny_repo / "double" / "1" / "model.py").write_text("raise RuntimeError('boom')\n")
    sign_handmade_model(tiny_repo / "double" / "1")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(E.ServingError, match="boom"):
        TritonServer(tiny_repo, startup_timeout=120).start()
    assert list(scratch.iterdir()) == []


# Waits in short sleeps: CPython runs a signal handler between bytecodes, so a SIGTERM that lands
# after the last check and before a blocking call starts is acted on only when that call returns
# (seen: SIGTERM's C handler had run, is_tripped = 1, and the main thread slept on in a single
# time.sleep(300) for the whole test timeout, about 1 run in 7 on the loaded 2-core box).
SERVE_AND_WAIT = """
import sys, time
from mass.serving import TritonServer
with TritonServer(sys.argv[1]) as server:
    print(server.process.pid, flush=True)
    while server.process.poll() is None:
        time.sleep(0.2)
"""


@pytest.mark.triton
@pytest.mark.parametrize("how", ["TritonServer", "mass serve"])
@pytest.mark.slow
def test_sigterm_removes_the_work_directory(how, tiny_repo, tmp_path, child):
    import psutil

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = ([sys.executable, "-c", SERVE_AND_WAIT, str(tiny_repo)] if how == "TritonServer"
            else [sys.executable, "-m", "mass.cli", "serve", "--repository", str(tiny_repo)])  # fmt: skip
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = child.first_line(proc, f"{how} (starting the server)")
        pid = int(line) if how == "TritonServer" else json.loads(line)["pid"]
        server = psutil.Process(pid)  # captured while it runs: a reused pid is not ours
        (workdir,) = scratch.glob("mass-triton-*")
        if how == "mass serve":
            access = Path(json.loads(line)["access_file"])
            assert access.parent == workdir and _mode(access) == 0o600
        proc.send_signal(signal.SIGTERM)
        code = child.exit_code(proc, f"{how} after SIGTERM")
    finally:
        child.stop(proc)
    assert code == (143 if how == "TritonServer" else 0)
    assert list(scratch.iterdir()) == []
    try:
        assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass  # reaped between the two looks


@pytest.mark.triton
@pytest.mark.slow
def test_sigterm_during_a_job_leaves_no_work_directory_and_no_release(tmp_path, fc, child):
    import time

    repo = tmp_path / "repo"
    repo.mkdir()
    fc.write_broken_model(repo, "slow")  # 2 s per request: the job is still running
    src = tmp_path / "in.parquet"
    fc.write_input(src, rows=20_000, row_group=5_000, image=None, note=None)
    scratch, out = tmp_path / "scratch", tmp_path / "release"
    scratch.mkdir()
    log = open(tmp_path / "job.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mass.cli", "anonymize", "--input", str(src), "--output",
         str(out), "--model", "slow", "--repository", str(repo), "--batch-rows", "500"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        started = "Started GRPCInferenceService"  # the job's server is up, requests flow
        while not any(started in p.read_text(errors="replace")
                      for p in scratch.glob("mass-triton-*/tritonserver.log")):  # fmt: skip
            assert proc.poll() is None and time.monotonic() < deadline, log.read()
            time.sleep(0.5)
        time.sleep(5)
        proc.send_signal(signal.SIGTERM)
        code = child.exit_code(proc, "mass anonymize after SIGTERM", timeout=120)
    finally:
        child.stop(proc)
    assert code != 0
    assert not list(scratch.glob("mass-triton-*"))
    assert not out.exists() and fc.leftovers(out) == []


# -- export names ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ['m"x', 'm\nbackend: "x"', ".hidden", "a/b", "-flag", "m x", "é", "m" * 65, ""]
)
def test_export_names_are_validated_before_anything_is_written(name, tmp_path, fc):
    fc.export_mod(tmp_path / "run", tmp_path / "repo", seed=0)
    before = fc.snapshot(tmp_path / "repo")
    with pytest.raises(E.ConfigError, match="--name"):
        fc.mass_command(["export", str(tmp_path / "run"), "--repository",
                         str(tmp_path / "repo"), f"--name={name}"])  # fmt: skip
    assert fc.snapshot(tmp_path / "repo") == before
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["mod"]


def test_ensemble_names_are_validated(tmp_path):
    from mass.serving.export import export_ensemble

    for kw in ({"name": 'r"'}, {"modifier": "m\n"}, {"extractor": "../x"}):
        args = {"extractor": "cnn", "modifier": "mod", **kw}
        with pytest.raises(E.ConfigError, match="--(name|modifier|extractor)"):
            export_ensemble(tmp_path / "repo", **args)
    assert not (tmp_path / "repo").exists()


def test_unsafe_config_strings_are_refused(tmp_path):
    from mass.serving.contract import Tensor
    from mass.serving.repository import model_config

    with pytest.raises(E.ConfigError, match="tensor name"):
        model_config("m", inputs=[Tensor('X" }', "TYPE_FP32", (2,))], outputs=[],
                     max_batch_size=1)  # fmt: skip
    with pytest.raises(E.ConfigError, match="parameter value"):
        model_config("m", inputs=[], outputs=[], max_batch_size=1,
                     parameters={"k": 'v"\nbackend: "x'})  # fmt: skip
