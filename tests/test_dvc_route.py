"""DVC as its users drive it (issue 27): after the demo's set-up, `dvc exp run -S ...` from a
plain shell - no `.venv/bin` on PATH, no MASS_*_KEY_FILE exported - runs the whole pipeline,
and `dvc exp show --csv` lists the summary metrics of both experiments.

The pipeline runs in a git repository made in a temporary directory from this checkout's
working tree (tracked and untracked, not ignored, files), with `.venv` linked; the checkout
is never touched. It runs the demo's pipeline with a 4-minute calibration budget and wider
margins (`-S`, see SMALL), so the test checks the route, not the demo's numbers; the second
experiment changes the release job only (`anonymize.shards`), so only its stage re-runs (the
README's `-S train.suppress=colour` needs the default budget to calibrate: measured, a
2-minute budget under load stopped before any candidate passed).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
# the demo's own extractor (its 15 epochs): with a 2-epoch extractor the noise-free release sat
# at the 1,000-row gate's resolution and was refused by 0.004 (docs/demo.md, "Current run")
# A route test, not the demo's numbers: the demo's release sits 0.005 under its limit, and a
# run of the pipeline from scratch in the copy was refused by its gate at the limit (0.166 vs
# 0.166, 2026-11-28); with a 2-minute budget calibration stopped before its first cell
# candidate (calibration's judges also train on half of each split's rows since the growth
# projection). So: 4 CPU-minutes, and every margin 0.10 for both experiments.
MARGIN = "0.1"
SMALL = ["-S", "calibration.budget_minutes=4", "-S", f"audit.frozen_margin={MARGIN}",
         *[a for f in ("logreg", "mlp", "gboost", "knn")
           for a in ("-S", f"audit.attacker_margin.{f}={MARGIN}")]]  # fmt: skip
SUMMARY = ("pass", "method", "noise", "privacy_excess", "utility_kept", "rows")


def _copy_working_tree(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


def _plain_env(repo: Path) -> dict[str, str]:
    """A user's shell: system PATH only, no key variables; the copy's code first."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                           if ".venv" not in p and not p.startswith(str(ROOT)))  # fmt: skip
    env = {"HOME": os.environ.get("HOME", str(repo)), "PATH": path, "PYTHONPATH": str(repo),
           "GX_ANALYTICS_ENABLED": "False", "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    assert not any(k.startswith("MASS_") for k in env)
    return env


def _run(cmd: list[str], repo: Path, env: dict[str, str], *, what: str | None = None,
         timeout: float | None = None) -> str:  # fmt: skip
    """``cmd`` in ``repo`` under ``env``: its stdout and stderr; a non-zero exit fails the test
    naming ``what`` (else the command) with the output's tail (tests/test_readme.py uses it)."""
    p = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    name = what or f"`{' '.join(cmd)}`"
    assert p.returncode == 0, f"{name} exited {p.returncode}:\n{out[-6000:]}"
    return out


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_dvc_exp_run_from_a_plain_shell_and_exp_show_compares(tmp_path):
    if not (VENV / "bin" / "dvc").exists():
        pytest.skip(".venv/ with dvc not made (make venv)")
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_working_tree(repo)
    (repo / ".venv").symlink_to(VENV.resolve())
    env = _plain_env(repo)
    _run(["git", "init", "-q"], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "copy"], repo, env)
    # the demo's set-up (key + .mass/local.yaml), without reinstalling the linked venv
    _run(["make", "-o", ".venv/bin/.installed", "demo-keys"], repo, env)
    assert "owner.key" in (repo / ".mass" / "local.yaml").read_text()

    dvc = ".venv/bin/dvc"  # not on PATH: the README's route
    outs = [_run([dvc, "exp", "run", "-n", "base", *SMALL], repo, env)]
    outs.append(_run([dvc, "exp", "run", "-n", "one-shard", *SMALL, "-S", "anonymize.shards=1"],
                     repo, env))  # fmt: skip
    assert "Stage 'train_modifier' didn't change, skipping" in outs[1], outs[1][-3000:]
    for out in outs:
        assert "is empty" not in out and "command not found" not in out, out[-3000:]

    table = _run([dvc, "exp", "show", "--csv"], repo, env)
    rows = list(csv.DictReader(io.StringIO(table)))
    by_name = {r["Experiment"]: r for r in rows if r.get("Experiment") in ("base", "one-shard")}
    assert set(by_name) == {"base", "one-shard"}, table
    for name, row in by_name.items():
        for col in SUMMARY:
            assert row.get(col) not in (None, ""), f"{name}: no {col} column/value in\n{table}"
    assert {"suppressed.digit.bound", "preserved.colour.kept"} <= set(rows[0]), table
    assert not any("ci_high" in c or "learning_curve" in c for c in rows[0]), table
    plots = _run([dvc, "plots", "diff", "base", "one-shard", "--json"], repo, env)
    assert "calibration_frontier" in plots and "learning_curves" in plots, plots[-3000:]
    _run([dvc, "push"], repo, env)
