"""The mutation check's machinery (the check itself runs on demand: tests/mutation/run.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import mutants
from mass.keys import OwnerKey
from mass.noise import keyed_row_seeds, noise_subkey
from mass import noise
ids = np.arange(50)
a, b = OwnerKey(b"a" * 32), OwnerKey(b"b" * 32)
assert (keyed_row_seeds(ids, a) != keyed_row_seeds(ids, b)).all()
mutants.apply("noise-key-ignored")  # its target: mass.noise:noise_subkey
# the name bound by `from ... import` runs the broken code too, and so do its callers
assert noise_subkey(a) == noise_subkey(b) == bytes(16)
assert (keyed_row_seeds(ids, a) == keyed_row_seeds(ids, b)).all()
assert noise.noise_subkey is noise_subkey
# a function behind functools.lru_cache is mutated through its __wrapped__ original
before = noise._worker_noise_subkey.__wrapped__.__code__
mutants.apply("worker-key-fingerprint-unchecked")
assert noise._worker_noise_subkey.__wrapped__.__code__ is not before
try:
    mutants.mutated_source(mutants.Mutant("gone", "mass.noise:no_such_function", "x", "y", (), ""))
except mutants.StaleMutant:
    print("stale-ok")
"""


def _beside(name: str):
    """The module ``name`` of tests/mutation/ (not a package: imported from its folder)."""
    import importlib

    sys.path.insert(0, str(HERE))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(HERE))


def test_a_mutant_replaces_the_code_everywhere_and_a_missing_target_is_stale():
    proc = subprocess.run([sys.executable, "-c", PROBE, str(HERE)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "stale-ok" in proc.stdout


def test_mutant_names_are_unique_and_each_has_tests_and_a_reason():
    mutants = _beside("mutants")
    assert len({m.name for m in mutants.MUTANTS}) == len(mutants.MUTANTS) >= 30
    assert all(m.tests and m.why and ":" in m.target for m in mutants.MUTANTS)


def test_every_mutant_still_aims_at_the_code_it_breaks():
    """A rewrite that removes a mutant's snippet leaves the mutation check blind there (five
    mutants had gone stale unnoticed until session 42): each snippet is in its target once."""
    mutants = _beside("mutants")
    stale = []
    for m in mutants.MUTANTS:
        try:
            mutants.mutated_source(m)
        except mutants.StaleMutant as e:
            stale.append(f"{m.name}: {e}")
    assert not stale, "re-aim these at the current code (tests/mutation/mutants.py):\n" + "\n".join(
        stale
    )


def test_a_named_test_runs_whatever_its_marks_and_a_file_runs_its_fast_tests():
    run = _beside("run")
    named = "tests/x/test_a.py::test_slow_end_to_end"
    assert run.pytest_runs([named, "tests/x/test_b.py"]) == [
        [named], ["-m", "not slow", "tests/x/test_b.py"]]  # fmt: skip
    assert run.pytest_runs([named]) == [[named]]  # no marker filter: a slow one still runs
    assert run.pytest_runs(["tests/x"]) == [["-m", "not slow", "tests/x"]]
    assert run.pytest_runs([]) == []
