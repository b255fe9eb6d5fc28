"""Does calibrated `mass train` work on data nobody tuned it for? (issue 13; docs/calibration.md)

Real datasets that ship offline with scikit-learn (no download): numeric columns standardised
into an embedding (the columns that define an attribute are labels, not features), split
70/30 stratified, `mass train` with no --config / --mode / --method (calibration, the project's
policy from params.yaml), then the release of the 30 % is judged by attackers retrained on it
(logreg, MLP, gradient boosting, kNN; 5-fold CV on the release): per suppressed attribute the
worst attacker vs max(majority, floor) + margin, per preserved attribute the best attacker's
fraction of its accuracy on the original 30 %. Writes one JSON line per dataset and a Markdown
table.

    python bench/generalize.py --out reports/generalize [--only digits,wine] [--budget-minutes 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FAMILIES = ("logreg", "mlp", "gboost", "knn")


def _above_median(v: np.ndarray) -> np.ndarray:
    return (v > np.median(v)).astype(np.int64)


def load(name: str) -> tuple[np.ndarray, dict[str, np.ndarray], list[str], list[str], str]:
    """(features, labels, suppress, preserve, description); features exclude the columns an
    attribute is defined from."""
    from sklearn import datasets as D

    if name == "digits":  # 8x8 handwritten digit images: pixels as the embedding
        b = D.load_digits()
        d = b.target
        labels = {"ge5": (d >= 5).astype(np.int64), "parity": (d % 2).astype(np.int64)}
        return b.data, labels, ["ge5"], ["parity"], "8x8 digit images (64 pixels), 1797 rows"
    if name == "breast_cancer":
        b = D.load_breast_cancer()
        cols = list(b.feature_names)
        i = cols.index("mean texture")
        labels = {"diagnosis": b.target.astype(np.int64), "texture": _above_median(b.data[:, i])}
        x = np.delete(b.data, i, axis=1)
        return x, labels, ["diagnosis"], ["texture"], "Wisconsin breast cancer, 29 numeric columns"
    if name == "wine":
        b = D.load_wine()
        cols = list(b.feature_names)
        i = cols.index("alcohol")
        labels = {"cultivar": b.target.astype(np.int64), "alcohol": _above_median(b.data[:, i])}
        return np.delete(b.data, i, axis=1), labels, ["cultivar"], ["alcohol"], "wine, 12 columns"
    if name == "diabetes":  # two suppressed, two preserved: calibrated jointly
        b = D.load_diabetes(scaled=False)
        cols = list(b.feature_names)
        ia, isx, ib = cols.index("age"), cols.index("sex"), cols.index("bmi")
        labels = {
            "sex": (b.data[:, isx] > 1.5).astype(np.int64),
            "age": _above_median(b.data[:, ia]),
            "progression": _above_median(b.target),
            "bmi": _above_median(b.data[:, ib]),
        }
        x = np.delete(b.data, [ia, isx, ib], axis=1)
        return x, labels, ["sex", "age"], ["progression", "bmi"], "diabetes, 7 columns"
    if name == "iris":
        b = D.load_iris()
        i = list(b.feature_names).index("petal width (cm)")
        labels = {"species": b.target.astype(np.int64), "petal": _above_median(b.data[:, i])}
        return np.delete(b.data, i, axis=1), labels, ["species"], ["petal"], "iris, 3 columns"
    raise SystemExit(f"unknown dataset {name!r}")


DATASETS = ("digits", "breast_cancer", "wine", "diabetes")


def split_70_30(labels: dict[str, np.ndarray], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from mass.calibrate import stratified_split
    from mass.rows import joint_codes

    return stratified_split(joint_codes(labels, sorted(labels)), 0.3, seed)


def write(path: str, ids: np.ndarray, x: np.ndarray, labels: dict[str, np.ndarray]) -> None:
    from mass.io import embedding_array

    cols = {"id": pa.array(ids.astype(np.int64)), "emb": embedding_array(x.astype(np.float32))}
    cols.update({k: pa.array(v) for k, v in labels.items()})
    pq.write_table(pa.table(cols), path)


def judge_release(x, xp, labels, suppress, preserve, margin: float, min_fraction: float):
    from mass.metrics import leakage_floor, majority_rate, retrained_attackers

    out = {}
    pres = {r: labels[r] for r in preserve}
    for s in suppress:
        y = labels[s]
        acc = retrained_attackers(xp, y, families=FAMILIES)
        base = max(majority_rate(y), leakage_floor(y, pres))
        out[s] = {"role": "suppressed", "majority": majority_rate(y),
                  "floor": leakage_floor(y, pres),
                  "original": max(retrained_attackers(x, y, families=("logreg", "knn")).values()),
                  "attackers": acc, "worst": max(acc.values()), "limit": base + margin,
                  "ok": max(acc.values()) <= base + margin + 1e-12}  # fmt: skip
    for r in preserve:
        y = labels[r]
        orig = retrained_attackers(x, y, families=FAMILIES)
        acc = retrained_attackers(xp, y, families=FAMILIES)
        frac = max(acc.values()) / max(max(orig.values()), 1e-12)
        out[r] = {"role": "preserved", "original": max(orig.values()), "attackers": acc,
                  "best": max(acc.values()), "fraction": frac,
                  "ok": frac >= min_fraction}  # fmt: skip
    return out


def run_one(name: str, out_dir: str, budget: float | None) -> dict:
    import torch

    from mass.calibrate import apply
    from mass.modifiers import load_modifier, normalize_rows
    from mass.noise import row_seeds

    x, labels, suppress, preserve, desc = load(name)
    tr, te = split_70_30(labels)
    mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-9  # standardised with the training rows' stats
    z = (x - mu) / sd
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    ids = np.arange(len(z))
    write(os.path.join(d, "train.parquet"), ids[tr], z[tr], {k: v[tr] for k, v in labels.items()})
    cmd = [sys.executable, "-m", "mass.cli", "train", "--data", os.path.join(d, "train.parquet"),
           "--suppress", ",".join(suppress), "--preserve", ",".join(preserve),
           "--policy", "params.yaml", "--out", os.path.join(d, "run"), "--no-progress"]  # fmt: skip
    if budget is not None:
        cmd += ["--budget-minutes", str(budget)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    row: dict = {"dataset": name, "description": desc, "rows": len(z), "train_rows": len(tr),
                 "test_rows": len(te), "dim": z.shape[1], "suppress": suppress,
                 "preserve": preserve, "rc": proc.returncode, "calibration_seconds": seconds,
                 "command": " ".join(cmd[1:])}  # fmt: skip
    cal_path = os.path.join(d, "run", "calibration.json")
    cal = json.load(open(cal_path)) if os.path.exists(cal_path) else {}
    row["verdict"] = cal.get("verdict")
    row["stopped"] = cal.get("stopped")
    row["chosen"] = (cal.get("chosen") or {}).get("candidate")
    row["noise"] = (cal.get("chosen") or {}).get("noise")
    if proc.returncode != 0:
        row["error"] = proc.stderr.strip().splitlines()[-12:]
        xt = normalize_rows(z[te])
        row["release"] = judge_release(xt, xt, {k: v[te] for k, v in labels.items()}, suppress,
                                       preserve, 0.05, 0.9)  # identity: what nothing-done leaks
        return row
    model = load_modifier(os.path.join(d, "run", "modifier.pt"))
    xt = normalize_rows(z[te])
    xp = apply(model, xt, row_seeds(pa.array(ids[te])))
    with torch.no_grad():
        row["release"] = judge_release(xt, xp, {k: v[te] for k, v in labels.items()}, suppress,
                                       preserve, 0.05, 0.9)  # fmt: skip
    return row


def table(rows: list[dict]) -> str:
    head = ("| dataset | S -> R | chosen (noise) | attribute | worst / best attacker on the 30 % "
            "release | limit or fraction | ok | calibration s |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        chosen = f"{r['chosen']} ({r['noise']})" if r["rc"] == 0 else f"none: exit {r['rc']}"
        task = f"{','.join(r['suppress'])} -> {','.join(r['preserve'])}"
        for a, v in r["release"].items():
            if v["role"] == "suppressed":
                val = f"{v['worst']:.3f} (maj {v['majority']:.3f}, floor {v['floor']:.3f})"
                lim = f"<= {v['limit']:.3f}"
            else:
                val = f"{v['best']:.3f} (orig {v['original']:.3f})"
                lim = f"{v['fraction']:.3f} of orig (>= 0.9)"
            ok = ("yes" if v["ok"] else "**no**") if r["rc"] == 0 else "(identity)"
            lines.append(f"| {r['dataset']} | {task} | {chosen} | {a} ({v['role'][:3]}) | {val} "
                         f"| {lim} | {ok} | {r['calibration_seconds']:.0f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports/generalize")
    ap.add_argument("--only", help="comma-separated subset of " + ",".join(DATASETS) + ",iris")
    ap.add_argument("--budget-minutes", type=float, help="passed to mass train (default: its own)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    names = args.only.split(",") if args.only else list(DATASETS)
    rows = []
    for name in names:
        row = run_one(name, args.out, args.budget_minutes)
        rows.append(row)
        print(json.dumps(row, default=float), flush=True)
    with open(os.path.join(args.out, "results.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, default=float) + "\n")
    md = table(rows)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
