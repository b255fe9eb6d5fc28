"""A release on an object store: nothing raw and nothing unaudited is ever readable under the
release prefix, while the job runs, after it fails its audit, or after it is killed.

Whoever may read ``s3://.../rel`` may list and read every key below it. The job's raw
intermediates (the pseudonymized copy of the input with every label and original embedding,
spills, filtered labels) and the staged release before its audit live in private scratch
(below --temp_location, else this machine's temp directory, mode 0700); the audited release is
copied under the prefix only at publication. A poller lists and reads the prefix during real
jobs (moto's S3 server, real Beam, real GX audit) and records every key it ever sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass import fs
from mass.embeddings import embedding_array
from mass.errors import AuditFailedError, ConfigError, OutputPathError
from mass.formats import RELEASE_MARKER, VERSIONS
from mass.testing.services import REPO
from mass.testing.stand_ins import RandomRotation, ZeroDims
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 16, 2000
INFO = {"name": "gate", "version": 1, "sha256": "abc", "method": "test",
        "suppress": ["digit"], "preserve": ["colour"], "config_hash": "h", "dim": DIM}  # fmt: skip
RELEASED = {"id", "emb"}


ERASE = ZeroDims(range(5))  # zeroes the digit dimensions (0-4): passes the audit
ROTATE = RandomRotation(DIM, dims=range(5))  # keeps digit readable: fails the audit


def _input(path) -> str:
    rng = np.random.default_rng(0)
    digit, colour = rng.integers(0, 5, ROWS), rng.integers(0, 3, ROWS)
    x = 0.3 * rng.normal(size=(ROWS, DIM))
    x[np.arange(ROWS), digit] += 3.0
    x[np.arange(ROWS), 5 + colour] += 2.0
    table = pa.table({"id": pa.array(np.arange(ROWS, dtype=np.int64)),
                      "emb": embedding_array(x.astype(np.float32)),
                      "digit": pa.array(digit), "colour": pa.array(colour)})  # fmt: skip
    pq.write_table(table, str(path), row_group_size=250)
    return str(path)


class Poller:
    """Lists ``prefix`` (and opens every Parquet object below it) in a loop until stopped:
    what a release reader with read access to the prefix could have seen during the job."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.keys, self.columns, self.polls = prefix, set(), {}, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                found = [fs.join(h, n) for h, _, ns in fs.walk(self.prefix) for n in ns]
            except OSError:
                found = []
            for key in found:
                self.keys.add(key[len(self.prefix) + 1 :])
                if key.endswith(".parquet") and key not in self.columns:
                    try:
                        with fs.open_input(key) as f:
                            self.columns[key] = set(pq.read_schema(f).names)
                    except (OSError, pa.ArrowInvalid):
                        pass  # gone (or not yet whole) between the listing and the read
            self.polls += 1
            time.sleep(0.01)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return _input(tmp_path_factory.mktemp("store-staging") / "in.parquet")


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "quick.yaml"
    path.write_text("audit:\n  folds: 3\n  curve: false\n  gate_key_compromised: false\n")
    return str(path)


def _run(src, out, load, *flags):
    handler = FunctionModelHandler(load, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", src, "--output", out, "--model", "gate", "--batch-rows", "100", *flags]
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


@pytest.mark.slow
def test_a_store_release_prefix_never_holds_raw_data_during_a_pseudonymized_job(
    s3, src, policy, tmp_path
):
    out = "s3://mass-test/staging1/rel"
    with Poller(out) as seen:
        summary = _run(src, out, ERASE, "--pseudonymize-ids", "--policy", policy,
                       "--report", str(tmp_path / "rep"))  # fmt: skip
    assert summary["audited"] and summary["rows_out"] == ROWS
    assert seen.polls > 20, "the poller must have watched the job"
    version = fs.read_json(f"{out}/{RELEASE_MARKER}")["version"]
    final = {RELEASE_MARKER} | {f"{version}/{k}" for k in fs.listdir(f"{out}/{version}")}
    assert seen.keys <= final, sorted(seen.keys - final)  # no other key, not even for a moment
    assert seen.columns and all(cols <= RELEASED for cols in seen.columns.values()), seen.columns
    assert not [k for k in seen.keys if k.endswith(".parquet") and not k.startswith(VERSIONS)]


@pytest.mark.slow
def test_a_release_that_fails_its_audit_is_never_readable_under_the_prefix(s3, src, policy):
    out = "s3://mass-test/staging2/rel"
    with Poller(out) as seen, pytest.raises(AuditFailedError, match="attribute 'digit'"):
        _run(src, out, ROTATE, "--policy", policy, "--pseudonymize-ids")
    assert seen.polls > 20
    assert seen.keys == set(), sorted(seen.keys)  # nothing at all: it was never published
    assert not fs.exists(out)


@pytest.mark.slow
def test_temp_location_holds_the_private_staging_and_is_emptied(s3, src, policy, tmp_path):
    out, temp = "s3://mass-test/staging3/rel", "s3://mass-test/private-tmp"
    with Poller(temp) as scratch:
        _run(src, out, ERASE, "--pseudonymize-ids", "--policy", policy,
             "--report", str(tmp_path / "rep"), f"--temp_location={temp}")  # fmt: skip
    staged = {k.split("/", 1)[1] for k in scratch.keys if k.startswith("mass-job-")}
    assert any(k.startswith("aux/ids/input-") for k in staged), sorted(staged)[:10]
    assert any(k.startswith("release/part-") for k in staged)
    assert not fs.exists(temp) or fs.listdir(temp) == []  # removed by the job


KILLED = """
import sys
import numpy as np
from beam_pipelines import anonymize
from transforms.inference.function import FunctionModelHandler
sys.path.insert(0, sys.argv[3])
from test_store_staging import ERASE, INFO
h = FunctionModelHandler(ERASE, output_dim=16, keep_input_as=anonymize.INPUT_COPY)
anonymize.run(["--input", sys.argv[1], "--output", sys.argv[2], "--model", "gate",
               "--pseudonymize-ids", "--policy", sys.argv[4], "--batch-rows", "100"],
              model_handler=h, model_info=INFO)
"""


@pytest.mark.slow
def test_a_job_killed_before_publication_leaves_its_raw_copy_only_in_private_scratch(
    s3, src, policy, tmp_path
):
    """SIGKILL after the audit, right before the commit: the prefix holds nothing; the dead
    job's scratch (0700, owner marker) is removed by the next run, which publishes."""
    from mass.release.commit import KILL_AT_ENV

    out, tmp = "s3://mass-test/staging4/rel", tmp_path / "tmpdir"
    tmp.mkdir()
    env = {**os.environ, KILL_AT_ENV: "before-swap", "PYTHONPATH": REPO, "TMPDIR": str(tmp)}
    proc = subprocess.run([sys.executable, "-c", KILLED, src, out, os.path.dirname(__file__),
                           policy], env=env, capture_output=True, timeout=600)  # fmt: skip
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert not fs.exists(out)
    (left,) = [p for p in tmp.iterdir() if p.name.startswith("mass-job-")]
    assert os.stat(left).st_mode & 0o077 == 0
    assert list(left.glob("aux/ids/input-*.parquet"))  # the raw copy: private, not released
    import tempfile

    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)  # this process's scratch: tmp too
    try:
        _run(src, out, ERASE, "--pseudonymize-ids", "--policy", policy,
             "--report", str(tmp_path / "rep"))  # fmt: skip
    finally:
        tempfile.tempdir = saved
    assert not [p for p in tmp.iterdir() if p.name.startswith("mass-job-")]
    assert fs.isfile(f"{out}/{RELEASE_MARKER}")


def test_a_store_release_on_a_named_runner_needs_a_private_temp_location(s3, src):
    with pytest.raises(ConfigError, match="--temp_location"):
        _run(src, "s3://mass-test/staging5/rel", ERASE, "--no-audit", "--runner=DaskRunner")
    with pytest.raises(OutputPathError, match="--temp_location .* inside --output"):
        _run(src, "s3://mass-test/staging5/rel", ERASE, "--no-audit",
             "--temp_location=s3://mass-test/staging5/rel/tmp")  # fmt: skip
    with pytest.raises(OutputPathError, match="--temp_location .* inside --quarantine"):
        _run(src, "s3://mass-test/staging5/rel", ERASE, "--no-audit",
             "--quarantine=s3://mass-test/staging5/q",
             "--temp_location=s3://mass-test/staging5/q/tmp")  # fmt: skip
    assert not fs.exists("s3://mass-test/staging5")
