"""Under CI (env CI set) a missing optional extra fails the test instead of skipping it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PROBE = """
import pytest

@pytest.mark.extra("nothing", "no_such_module_for_mass_tests")
def test_marked_extra():
    pass

def test_importorskip():
    pytest.importorskip("no_such_module_for_mass_tests")

@pytest.mark.extra("stdlib", "json")
def test_present_extra_runs():
    pass
"""


@pytest.mark.parametrize("ci, outcome", [("", dict(passed=1, skipped=2)),
                                         ("true", dict(passed=1, failed=1, errors=1))])  # fmt: skip
def test_missing_extra_skips_locally_and_fails_in_ci(pytester, monkeypatch, ci, outcome):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_probe=PROBE)
    monkeypatch.setenv("CI", ci)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(**outcome)
    if ci:
        result.stdout.fnmatch_lines(["*CI is set*no_such_module_for_mass_tests*"])
