"""`mass bench NAME ARGS` is a thin launcher of `python bench/NAME.py ARGS` in a checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mass.commands import bench as launcher

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_benchmark_is_a_script_under_bench():
    assert launcher.bench_dir() == ROOT / "bench"
    for name in launcher.SCRIPTS:
        text = (ROOT / "bench" / f"{name}.py").read_text()
        assert 'if __name__ == "__main__":' in text, name


def test_mass_bench_passes_arguments_through_and_returns_the_scripts_status(tmp_path):
    out = tmp_path / "report.json"
    argv = ["throughput", "--rows", "300", "--dims", "8", "--parts", "limit",
            "--limit-threads", "1", "--batch-rows", "100", "--out", str(out)]  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "mass.cli", "bench", *argv],
                       capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert '"benchmark": "throughput"' in out.read_text()
    bad = subprocess.run([sys.executable, "-m", "mass.cli", "bench", "throughput", "--parts", "x"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "unknown ['x']" in bad.stderr  # the script's own parser


def test_without_a_checkout_the_error_says_so_and_nothing_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launcher, "bench_dir", lambda: tmp_path / "bench")
    args = launcher.argparse.Namespace(bench="quality", args=["--quick"])
    assert launcher.run(args) == 2
    err = capsys.readouterr().err
    assert "bench/quality.py not found" in err and "source checkout" in err
