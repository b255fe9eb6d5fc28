"""Nothing that nobody signed runs in a server of ours, and no key reaches one (issue 23, item 1).

A python-backend folder planted in the repository (``repo/evil/1/model.py`` + config.pbtxt,
no export.json or signature) would be imported by ``tritonserver``, which loads every model of
the repository it is given, in a stub with the server's environment: it wrote a marker, copied
that environment and read the owner key through ``MASS_SIGNING_KEY_FILE``. Now the server runs
on a private copy of the verified models the job needs, with explicit model control, and no key
variable in its environment. The planted model writes a marker, dumps its environment and
copies whatever key file it can find: the tests assert the marker never appears and that a
signed model's stub sees no key path and no key bytes.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from mass import errors as E
from mass.keys import NOISE_KEY_ENV, SIGNING_KEY_ENV
from mass.serving import TritonServer

pytestmark = pytest.mark.triton

# Runs at import, as a stub loads it: a marker with the stub's environment, then a copy of
# every key file the environment names.
SPY_MODEL = """import json, os
MARK = {marker!r}
with open(MARK, "w") as f:
    json.dump(dict(os.environ), f)
for var in ("MASS_SIGNING_KEY_FILE", "MASS_NOISE_KEY_FILE"):
    path = os.environ.get(var)
    if path:
        try:
            with open(path, "rb") as src, open(MARK + "." + var, "wb") as dst:
                dst.write(src.read())
        except OSError:
            pass
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU }} ]
"""


def plant(repo: Path, name: str, marker: Path) -> Path:
    """``repo/<name>/1/model.py`` + config.pbtxt: what an attacker (or a stray copy) leaves."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(SPY_MODEL.format(marker=str(marker)))
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    return repo / name


def _key_bytes() -> list[bytes]:
    paths = {os.environ[v] for v in (NOISE_KEY_ENV, SIGNING_KEY_ENV) if os.environ.get(v)}
    return [Path(p).read_bytes().strip() for p in paths]


def _no_key_in(text: str) -> None:
    for var in (NOISE_KEY_ENV, SIGNING_KEY_ENV):
        path = os.environ.get(var)
        assert var not in text and (not path or path not in text)
    for secret in _key_bytes():
        assert secret.decode() not in text and secret.split(b":")[-1].decode() not in text


@pytest.mark.slow
def test_a_planted_model_never_runs_in_the_jobs_server(tmp_path, fc, caplog, monkeypatch):
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "run", repo, seed=0)
    marker = tmp_path / "evil-ran"
    plant(repo, "evil", marker)
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    fc.write_input(src)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    with caplog.at_level(logging.WARNING, logger="mass.serving"):
        fc.mass_command(["anonymize", "--input", str(src), "--output", str(out), "--model",
                         "mod", "--repository", str(repo), "--no-audit"])  # fmt: skip
    assert (out / "_release.json").exists()  # the job still publishes with its signed model
    assert not list(tmp_path.glob("evil-ran*"))  # the planted code never ran
    assert any("never loaded" in r.getMessage() and "evil" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    assert list(scratch.glob("mass-triton-*")) == []


def test_an_unsigned_folder_under_the_requested_name_is_refused_before_a_server(tmp_path, fc,
                                                                               monkeypatch):  # fmt: skip
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "run", repo, seed=0)
    marker = tmp_path / "evil-ran"
    plant(repo, "evil", marker)
    src = tmp_path / "in.parquet"
    fc.write_input(src)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    jobs = {
        "anonymize": ["anonymize", "--input", str(src), "--model", "evil", "--no-audit"],
        "extract": ["extract", "--input", str(src), "--model", "evil", "--raw-col", "image"],
    }
    for cmd, argv in jobs.items():
        out = tmp_path / f"out-{cmd}"
        with pytest.raises(E.UnsignedModelError, match=rf"{repo / 'evil'}: not a signed export"):
            fc.mass_command([*argv, "--output", str(out), "--repository", str(repo)])
        assert not out.exists() and fc.leftovers(out) == []
    with pytest.raises(E.UnsignedModelError, match=rf"{repo / 'evil'}: not a signed export"):
        TritonServer(repo, models=["evil"]).start()
    assert list(scratch.iterdir()) == []  # no server work directory was left (or kept)
    assert not list(tmp_path.glob("evil-ran*"))


def test_a_signed_models_stub_sees_no_key(tmp_path, sign_handmade_model):
    """The stubs' environment holds no key variable, no key path and no key bytes (the spy
    is signed, so it runs and reports)."""
    repo = tmp_path / "repo"
    marker = tmp_path / "spy-env.json"
    spy = plant(repo, "spy", marker)
    sign_handmade_model(spy / "1")
    assert os.environ.get(SIGNING_KEY_ENV)  # the job itself has the key
    with TritonServer(repo, startup_timeout=300) as server:
        work = server._workdir
        modes = {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in (work, work / "models")
                 if p.exists()}  # fmt: skip
        staged = [m.name for m in getattr(server, "staged", [])]
    text = marker.read_text()
    env = json.loads(text)
    assert not [k for k in env if k.upper().startswith("MASS_") or "KEY" in k.upper()]
    _no_key_in(text)
    assert not list(tmp_path.glob("spy-env.json.*"))  # no key file was found to copy
    assert staged == ["spy"] and set(modes.values()) == {0o700}
    assert not work.exists()


def test_a_named_version_is_staged_alone_and_others_never_load(tmp_path, fc, caplog):
    """Only what the server is asked to serve is staged: another signed export and a planted
    folder stay out (named in the log), and ``load_models`` outside it is an error."""
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "a", repo, seed=0)
    fc.export_mod(tmp_path / "b", repo, seed=1)
    fc.export_mod(tmp_path / "c", repo, seed=2, name="other")
    plant(repo, "evil", tmp_path / "evil-ran")
    from mass.keys import resolve_key
    from mass.serving.staging import stage_models

    key = resolve_key(None, SIGNING_KEY_ENV)
    with caplog.at_level(logging.INFO, logger="mass.serving"):
        staged = stage_models(repo, tmp_path / "staged", {"mod": 1}, key)
    assert [(m.name, m.version) for m in staged] == [("mod", 1)]
    assert sorted(p.name for p in (tmp_path / "staged").iterdir()) == ["mod"]
    assert sorted(p.name for p in (tmp_path / "staged" / "mod").iterdir()) == [
        "1", "config.pbtxt", "mass-staged.json"]  # fmt: skip
    logged = {(r.levelno, r.getMessage().split(": ", 1)[1]) for r in caplog.records}
    # the unsigned folder warns; the other signed export, not asked for, is only noted
    assert logged == {
        (logging.WARNING, "never loaded (not a signed export): evil"),
        (logging.INFO, "not requested, not loaded (signed exports): other"),
    }
    with pytest.raises(E.ServingError, match=r"load_models \['other'\]: not staged"):
        TritonServer(repo, models=["mod"], model_control="explicit", load_models=("other",)).start()
    with pytest.raises(E.UnsignedModelError, match="no such version"):
        stage_models(repo, tmp_path / "staged2", {"mod": 7}, key)
    assert not (tmp_path / "evil-ran").exists()
