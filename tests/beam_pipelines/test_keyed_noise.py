"""Keyed release noise (docs/threat-model.md): an attacker with all our code and every release
with its ids cannot recompute the noise and subtract it; the owner, with the key, can.

The attack is written here as an attacker would write it, from the code and the release only:
for each released id recompute the public per-row noise ``row_noise(row_seeds(id))`` (for MaSS
output noise the ``+ 0x5EED`` stream), read the noise scale from the release's own
``mass.modifier`` metadata, undo the final renormalisation (the one scale ``c`` with
``||c * x' - a|| = 1``), subtract, and retrain logistic regression on labelled rows. Real Beam
(FnApiRunner) and a real tritonserver; small synthetic data so each job takes seconds.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from beam_pipelines import anonymize
from mass.errors import ConfigError
from mass.keys import NOISE_KEY_ENV, PREFIX, read_key
from mass.noise import KeyedSeeds, keyed_row_seeds, release_row_seeds, row_noise, row_seeds
from mass.synthetic import make_synthetic, to_table

DIM, ROWS, NAN_ROW = 16, 1200, 7
CHANCE = 0.5  # two balanced classes of s
MODELS = {  # served name -> (method, modifier factory)
    "mass_out": "mass",  # DataModifier, output noise 8 (norm ~8 against a unit signal)
    "gauss": "gaussian",  # GaussianNoiseModifier, sigma 2
}


def _modifier(name: str):
    from mass.modifiers import DataModifier, GaussianNoiseModifier, ModifierSpec, NoiseSpec

    torch.manual_seed(0)
    if name == "mass_out":
        return DataModifier(ModifierSpec(DIM, hidden=(32,), output_noise=8.0)).eval()
    return GaussianNoiseModifier(NoiseSpec(DIM, 1.0 if name == "gauss_lo" else 2.0)).eval()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Synthetic input (one NaN row, so a quarantine file exists), a repository, two keys."""
    from mass.modifiers import save_modifier
    from mass.serving.export import export_modifier

    base = tmp_path_factory.mktemp("keyed")
    ds = make_synthetic(ROWS, DIM, s_classes=2, sep_s=1.0, noise=0.3, seed=1)
    table = to_table(ds)
    x = ds.x.copy()
    x[NAN_ROW, 0] = np.nan
    from mass.embeddings import embedding_array

    table = table.set_column(1, "emb", embedding_array(x))
    pq.write_table(table, base / "in.parquet", row_group_size=500)
    for name, method in MODELS.items():
        run = base / name
        run.mkdir()
        save_modifier(_modifier(name), str(run / "modifier.pt"), method=method,
                      suppress=["s"], preserve=["u"], config_hash=name)  # fmt: skip
        export_modifier(run, base / "repo", name, max_batch_size=512)
    (base / "gauss_lo").mkdir()  # in-process only: a second release of the same rows
    save_modifier(_modifier("gauss_lo"), str(base / "gauss_lo/modifier.pt"), method="gaussian",
                  suppress=["s"], preserve=["u"], config_hash="gauss_lo")  # fmt: skip
    (base / "keys").mkdir()
    keys = {k: _fixed_key(str(base / "keys" / f"{k}.key"), k) for k in ("a", "b")}
    return {"base": base, "src": str(base / "in.parquet"), "s": ds.labels["s"], "keys": keys}


def _fixed_key(path: str, name: str):
    """A key file like `mass keygen` writes, with fixed bytes so the figures are reproducible."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(PREFIX + hashlib.sha256(f"test key {name}".encode()).hexdigest() + "\n")
    return read_key(path)


@pytest.fixture(scope="module")
def server(data, triton_server_factory):
    return triton_server_factory(data["base"] / "repo")


def _anonymize(data, out, model, *flags, url=None):
    argv = ["--input", data["src"], "--output", str(out), "--model", model, "--repository",
            str(data["base"] / "repo"), "--max-quarantined", "1", "--no-audit", *flags]  # fmt: skip
    if url:
        argv += ["--triton-url", url]
    return anonymize.run(argv)


def _release(out):
    table = pq.read_table(out).sort_by("id")
    ids = table.column("id").to_numpy()
    x = np.stack(table.column("emb").to_numpy(zero_copy_only=False)).astype(np.float64)
    return ids, x, table.schema.metadata


# ---- the attacker's code: public functions of the id, the release's own metadata ---------------


def _noise_of(seeds: np.ndarray, modifier: dict) -> np.ndarray:
    """The noise vector ``a`` a modifier of this kind/spec adds before its last normalisation."""
    spec, s = modifier["spec"], torch.from_numpy(seeds)
    if modifier["kind"] == "mass":  # n(G(x) + o * z(seed + 0x5EED) / sqrt(d))
        z = row_noise(s + 0x5EED, spec["dim"]).numpy().astype(np.float64)
        return spec["output_noise"] * z / spec["dim"] ** 0.5
    assert modifier["kind"] == "gaussian_noise"  # n(n(x) + sigma * eps(seed))
    return spec["sigma"] * row_noise(s, spec["dim"]).numpy().astype(np.float64)


def _denoise(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Undo x' = n(y + a) for a unit y: the c > 0 with ||c x' - a|| = 1 fixes the scale."""
    xa = (x * a).sum(1, keepdims=True)
    c = xa + np.sqrt(np.maximum(xa**2 - (a * a).sum(1, keepdims=True) + 1.0, 0.0))
    return c * x - a


def _retrained_accuracy(x: np.ndarray, y: np.ndarray) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    return float(cross_val_score(LogisticRegression(max_iter=2000), x, y, cv=3).mean())


def denoising_attack(out, labels: np.ndarray, seeds_of) -> tuple[float, float]:
    """(accuracy on the release, accuracy after subtracting the noise ``seeds_of(ids)`` gives)."""
    ids, x, meta = _release(out)
    modifier = json.loads(meta[b"mass.modifier"])
    y = labels[ids]
    return _retrained_accuracy(x, y), _retrained_accuracy(
        _denoise(x, _noise_of(seeds_of(ids, meta), modifier)), y
    )


# ---- tests ---------------------------------------------------------------------------------------


@pytest.mark.triton
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.slow
def test_public_id_denoising_recovers_nothing_from_a_keyed_release(data, server, model, tmp_path):
    out = tmp_path / "release"
    summary = _anonymize(data, out, model, "--noise-key-file", str(data["keys"]["a"].source),
                         url=server.grpc_url)  # fmt: skip
    assert summary["rows_out"] == ROWS - 1
    _, _, meta = _release(out)
    assert meta[b"mass.noise_key_fingerprint"] == data["keys"]["a"].fingerprint.encode()
    public, public_denoised = denoising_attack(out, data["s"], lambda ids, _: row_seeds(ids))
    _, keyed_denoised = denoising_attack(
        out, data["s"], lambda ids, meta: release_row_seeds(ids, data["keys"]["a"], meta)
    )
    print(f"{model}: release {public:.3f}, public-id denoised {public_denoised:.3f}, "
          f"denoised with the key {keyed_denoised:.3f}")  # fmt: skip
    assert public < CHANCE + 0.15  # the noise itself hides most of s from a retrained attacker
    assert abs(public_denoised - CHANCE) < 0.06  # recomputing public noise gains nothing
    assert keyed_denoised > 0.95  # ... while the key holder removes it (so the attack is real)
    _, wrong_key = denoising_attack(
        out, data["s"], lambda ids, meta: release_row_seeds(ids, data["keys"]["b"], meta)
    )
    assert abs(wrong_key - CHANCE) < 0.06


@pytest.mark.triton
def test_same_key_same_bytes_other_key_other_noise_and_no_key_bytes_anywhere(
    data, server, tmp_path, capfd, caplog
):
    key_a, key_b = data["keys"]["a"], data["keys"]["b"]
    a1, a2, b = tmp_path / "a1", tmp_path / "a2", tmp_path / "b"
    caplog.set_level("DEBUG")
    _anonymize(data, a1, "gauss", "--noise-key-file", key_a.source, url=server.grpc_url)
    _anonymize(data, a2, "gauss", "--noise-key-file", key_a.source, "--batch-rows", "333",
               "--noise-key-on-worker", url=server.grpc_url)  # fmt: skip
    _anonymize(data, b, "gauss", "--noise-key-file", key_b.source, url=server.grpc_url)
    printed = capfd.readouterr()
    assert _bytes(a1) == _bytes(a2)  # re-run (other batching, key read on the worker): same bytes
    ids_a, xa, meta_a = _release(a1)
    ids_b, xb, meta_b = _release(b)
    assert (ids_a == ids_b).all()
    cos = (xa * xb).sum(1)
    assert (cos < 0.99).all()  # every row got other noise
    assert (
        meta_b[b"mass.noise_key_fingerprint"]
        == key_b.fingerprint.encode()
        != (meta_a[b"mass.noise_key_fingerprint"])
    )
    assert json.loads(meta_a[b"mass.modifier"]) == {"kind": "gaussian_noise",
                                                    "spec": {"dim": DIM, "sigma": 2.0}}  # fmt: skip
    files = [f for d in (a1, a2, b) for f in glob.glob(f"{d}*/**", recursive=True)]
    files = [f for f in files if os.path.isfile(f)]
    assert any("_quarantine" in f for f in files)  # the NaN row's quarantine file is scanned too
    texts = [open(f, "rb").read() for f in files]
    texts += [printed.out.encode(), printed.err.encode(), caplog.text.encode()]
    for key in (key_a, key_b):
        for secret in _secret_forms(key):
            assert not any(secret in t for t in texts)


def _secret_forms(key) -> list[bytes]:
    forms = []
    for raw in (key.secret, key.subkey("noise", 16)):
        forms += [raw, raw.hex().encode(), raw.hex().upper().encode()]
    return forms


def _bytes(out) -> dict[str, bytes]:
    return {os.path.basename(f): open(f, "rb").read()
            for f in sorted(glob.glob(os.path.join(out, "*.parquet")))}  # fmt: skip


@pytest.mark.parametrize("model", list(MODELS))
def test_a_stochastic_modifier_without_a_key_is_refused_before_any_work(
    data, model, tmp_path, monkeypatch
):
    monkeypatch.delenv(NOISE_KEY_ENV, raising=False)
    out = tmp_path / "release"
    with pytest.raises(ConfigError, match="is stochastic.*--noise-key-file.*nothing was published"):
        _anonymize(data, out, model)
    assert os.listdir(tmp_path) == []  # no release, no quarantine, nothing staged


def test_a_modifier_of_unknown_stochasticity_needs_the_key(data, tmp_path, monkeypatch):
    """A remote server without export.json, or an in-process model that does not say."""
    from mass.testing.stand_ins import NumpyModifier
    from transforms.inference.function import FunctionModelHandler

    monkeypatch.delenv(NOISE_KEY_ENV, raising=False)
    out = tmp_path / "release"
    with pytest.raises(ConfigError, match="may be stochastic"):  # never contacts the server
        _anonymize(data, out, "gauss", "--repository", str(tmp_path / "none"),
                   url="127.0.0.1:1")  # fmt: skip
    handler = FunctionModelHandler(NumpyModifier(), output_dim=DIM,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    for info in (
        {"name": "np", "dim": DIM},  # says nothing
        {"name": "np", "dim": DIM, "stochastic": False},
    ):  # an export before `modifier`
        with pytest.raises(ConfigError, match="may be stochastic"):
            anonymize.run(["--input", data["src"], "--output", str(out), "--model", "np", "--no-audit"],
                          model_handler=handler, model_info=info)  # fmt: skip
    assert os.listdir(tmp_path) == []


def test_cli_refuses_without_a_key_and_publishes_nothing(data, tmp_path, monkeypatch, capsys):
    from mass.cli import main

    monkeypatch.delenv(NOISE_KEY_ENV, raising=False)
    out = tmp_path / "release"
    rc = main(["anonymize", "--input", data["src"], "--output", str(out), "--model", "gauss",
               "--repository", str(data["base"] / "repo"), "--no-audit"])  # fmt: skip
    assert rc == 2 and "ConfigError" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
    rc = main(["anonymize", "--input", data["src"], "--output", str(out), "--model", "gauss",
               "--repository", str(data["base"] / "repo"), "--no-audit",
               "--noise-key-file", str(tmp_path / "missing.key")])  # fmt: skip
    assert rc == 2 and "mass keygen" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_a_deterministic_modifier_runs_without_a_key_and_records_none(data, tmp_path, monkeypatch):
    from mass.testing.stand_ins import NumpyModifier
    from transforms.inference.function import FunctionModelHandler

    monkeypatch.delenv(NOISE_KEY_ENV, raising=False)
    handler = FunctionModelHandler(NumpyModifier(), output_dim=DIM,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    out = tmp_path / "release"
    anonymize.run(["--input", data["src"], "--output", str(out), "--model", "np",
                   "--max-quarantined", "1", "--no-audit"],
                  model_handler=handler,
                  model_info={"name": "np", "dim": DIM, "stochastic": False,
                              "modifier": {"kind": "np", "spec": {}}})  # fmt: skip
    assert (
        pq.read_schema(glob.glob(f"{out}/*.parquet")[0]).metadata[b"mass.noise_key_fingerprint"]
        == b""
    )


def test_the_in_process_handler_gets_the_jobs_keyed_seeds(data, tmp_path):
    """FunctionModelHandler's default inputs are rebound to the key like Triton's."""
    out = tmp_path / "release"
    key = data["keys"]["a"]
    _in_process(data, out, "gauss", "sha-gauss", 2.0, "--noise-key-file", key.source)
    _, public_denoised = denoising_attack(out, data["s"], lambda ids, _: row_seeds(ids))
    _, keyed_denoised = denoising_attack(
        out, data["s"], lambda ids, meta: release_row_seeds(ids, key, meta)
    )
    assert abs(public_denoised - CHANCE) < 0.06 and keyed_denoised > 0.95


def test_keyed_seeds_pickle_holds_no_owner_key_and_workers_check_the_fingerprint(data, tmp_path):
    key_a, key_b = data["keys"]["a"], data["keys"]["b"]
    ids = np.arange(100)
    in_job = KeyedSeeds.of(key_a)
    blob = pickle.dumps(in_job)
    assert key_a.secret not in blob and key_a.secret.hex().encode() not in blob
    on_worker = KeyedSeeds.of(key_a, read_on_worker=True)
    blob = pickle.dumps(on_worker)
    assert all(s not in blob for s in _secret_forms(key_a))  # nothing secret travels
    expected = keyed_row_seeds(ids, key_a)
    np.testing.assert_array_equal(pickle.loads(blob)(ids), expected)
    np.testing.assert_array_equal(in_job(ids), expected)
    forged = KeyedSeeds(key_b.fingerprint, key_file=key_a.source)  # a worker with another key
    with pytest.raises(ConfigError, match="fingerprint"):
        forged(ids)
    assert read_key(key_a.source).fingerprint == key_a.fingerprint


def _in_process(data, out, run: str, sha: str, sigma: float, *flags):
    from transforms.inference.function import FunctionModelHandler, TorchModifierFunction

    handler = FunctionModelHandler(TorchModifierFunction(str(data["base"] / run / "modifier.pt")),
                                   output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    spec = {"dim": DIM, "sigma": sigma}
    info = {"name": run, "sha256": sha, "stochastic": True,
            "modifier": {"kind": "gaussian_noise", "spec": spec}}  # fmt: skip
    argv = ["--input", data["src"], "--output", str(out), "--model", run,
            "--max-quarantined", "1", "--no-audit", *flags]  # fmt: skip
    anonymize.run(argv, model_handler=handler, model_info=info)


def test_two_modifiers_releasing_the_same_rows_never_share_their_noise(data, tmp_path):
    """Noise shared across releases cancels: x'_A ~ y + 2z and x'_B ~ y + z give y from their
    difference. The seed is bound to the modifier (its sha256), so it never is shared."""
    key = data["keys"]["a"].source
    _in_process(data, tmp_path / "a", "gauss", "sha-a", 2.0, "--noise-key-file", key)
    _in_process(data, tmp_path / "b", "gauss_lo", "sha-b", 1.0, "--noise-key-file", key)
    # control: what releasing B under A's seeds (one seed per row for every release) would give
    _in_process(data, tmp_path / "shared", "gauss_lo", "sha-a", 1.0, "--noise-key-file", key)
    ids, xa, _ = _release(tmp_path / "a")
    y = data["s"][ids]
    for name in ("b", "shared"):
        ids_b, xb, _ = _release(tmp_path / name)
        assert (ids_b == ids).all()
        difference = _retrained_accuracy(xb - xa, y)  # the two noise scales differ only 2x
        print(f"{name}: difference attack {difference:.3f}, A alone "
              f"{_retrained_accuracy(xa, y):.3f}, B alone {_retrained_accuracy(xb, y):.3f}, "
              f"A and B as features {_retrained_accuracy(np.hstack([xa, xb]), y):.3f}")  # fmt: skip
        if name == "shared":
            assert difference > 0.9  # the attack is real: shared noise cancels
        else:  # independent noise: the pair gives no more than its better release alone
            best = max(_retrained_accuracy(xa, y), _retrained_accuracy(xb, y))
            assert difference < best + 0.03, (difference, best)
            assert abs((xa * xb).sum(1).mean()) < 0.2  # nearly orthogonal


@pytest.mark.triton
def test_the_audit_key_compromised_view_of_a_served_release_removes_its_noise(
    data, server, tmp_path
):
    """The owner's audit with the key must strip the noise the JOB drew (seeds bound to the
    model's sha256), not another draw: on a release whose privacy rests on the noise alone,
    the key-compromised attackers read s back, and with the other key nothing is computed."""
    from mass.audit import AuditPolicy, AuditRequest, run_audit

    out = tmp_path / "release"
    _anonymize(data, out, "gauss", "--noise-key-file", str(data["keys"]["a"].source),
               url=server.grpc_url)  # fmt: skip
    policy = AuditPolicy(families=("logreg",), folds=3)
    labels = tmp_path / "labels.parquet"  # the input without its quarantined NaN row
    table = pq.read_table(data["src"])
    pq.write_table(table.filter(pa.array(np.arange(len(table)) != NAN_ROW)), labels)

    def audit(key):
        req = AuditRequest(release=str(out), labels=str(labels), suppress=("s",),
                           preserve=("u",), policy=policy, noise_key=key)  # fmt: skip
        return {r.name: r for r in run_audit(req).reports}["s"]

    s = audit(data["keys"]["a"])
    assert s.key_compromised is not None and s.key_compromised["logreg"] > 0.95
    assert s.attackers["logreg"] < CHANCE + 0.15  # the release itself hides most of s
    assert audit(data["keys"]["b"]).key_compromised is None  # another key: not computed


def test_the_noise_key_on_worker_flag_keeps_every_key_out_of_the_job_pickle(tmp_path):
    """`mass anonymize --noise-key-on-worker`: the job's ROW_SEED source pickles no key
    material at all, only the key file's path and fingerprint; without the flag it carries
    the release subkey (kills job-noise-key-on-worker-ignored)."""
    import argparse

    from beam_pipelines.plan import plan_anonymize
    from beam_pipelines.preflight import keyed_seeds
    from mass.keys import write_key
    from mass.noise import noise_subkey

    key = write_key(str(tmp_path / "owner.key"))
    parser = argparse.ArgumentParser()
    anonymize.add_arguments(parser)
    (tmp_path / "in.parquet").write_bytes(b"")  # planning checks the paths, never reads them
    base = ["--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out"),
            "--model", "m", "--noise-key-file", key.source, "--no-audit"]  # fmt: skip
    info = {"sha256": "ab" * 32}
    secrets = [*_secret_forms(key), noise_subkey(key, info["sha256"])]
    for flag, on_worker in (([], False), (["--noise-key-on-worker"], True)):
        job = plan_anonymize(parser.parse_args([*base, *flag]))  # the flag's one route
        seeds = keyed_seeds(job, info)
        blob = pickle.dumps(seeds)
        if on_worker:
            assert seeds.subkey is None and seeds.key_file == os.path.abspath(key.source)
            assert all(s not in blob for s in secrets)
        else:
            assert seeds.subkey is not None and seeds.subkey in blob
        ids = np.arange(50)
        np.testing.assert_array_equal(pickle.loads(blob)(ids),
                                      keyed_row_seeds(ids, key, info["sha256"]))  # fmt: skip
