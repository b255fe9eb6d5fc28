"""The `mass` process's environment defaults (mass.cli._process_defaults): set before torch
loads, and never over a value the user gave."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from mass.cli import _process_defaults


def test_idle_openmp_threads_sleep_unless_the_environment_says_otherwise(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    _process_defaults()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    _process_defaults()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_the_entry_point_sets_its_defaults_before_torch_is_imported():
    # libgomp reads OMP_WAIT_POLICY once, when torch loads it: a default set after `import
    # torch` would do nothing.
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = (
        "import sys, os, mass.cli\n"
        "assert 'torch' not in sys.modules, 'mass.cli imports torch'\n"
        "real = mass.cli._process_defaults\n"
        "def check():\n"
        "    assert 'torch' not in sys.modules, 'torch imported before the defaults'\n"
        "    real()\n"
        "mass.cli._process_defaults = check\n"
        "try:\n"
        "    mass.cli.main(['train', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ['OMP_WAIT_POLICY'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    assert out[-1] == "PASSIVE"


def test_a_command_that_imports_the_audit_logs_nothing_of_gx_at_info(tmp_path):
    # GX logs ~200 lines of decorator bookkeeping at INFO while it imports; every `mass train`
    # printed them before its own messages (the audit's runner imported GX before the module
    # that quietened it).
    env = {**os.environ, "MASS_LOCAL_CONFIG": ""}
    missing = tmp_path / "missing.parquet"
    proc = subprocess.run([sys.executable, "-m", "mass.cli", "train", "--data", str(missing),
                           "--suppress", "S", "--preserve", "R", "--out", str(tmp_path / "o")],
                          env=env, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode != 0
    assert f"{missing}: no such file" in proc.stderr  # the run reached the audit's import
    assert "great_expectations" not in proc.stderr, proc.stderr[:2000]


def test_beams_note_on_postponed_annotations_is_dropped_and_its_warnings_pass():
    from mass.cli import _KnownImportNoise

    def record(level, msg):
        return logging.LogRecord("apache_beam.typehints.native_type_compatibility", level,
                                 "native_type_compatibility.py", 1, msg, ("pa.RecordBatch",),
                                 None)  # fmt: skip

    keep = _KnownImportNoise().filter
    assert not keep(record(logging.INFO, 'Converting string literal type hint to Any: "%s"'))
    assert keep(record(logging.WARNING, 'Converting string literal type hint to Any: "%s"'))
    assert keep(record(logging.INFO, "any other note: %s"))
