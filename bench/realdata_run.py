"""The runner of `mass bench realdata` (bench/realdata.py; issue 34).

Per dataset: the 70 % training split written as Parquet, `mass train` with no --config /
--mode / --method / --watch (a new user's calibrated run, bench/generalize.py's
``calibrate_run``; its CPU seconds are the child process's), then every release of
bench/generalize_table.py (identity, the calibrated choice, the last resort, LEACE + noise,
the ot-repair family with its cells, the transductive repair) fitted on the training rows and
judged on the 30 % release by the gate's own rule (:func:`generalize_table.evaluate`: every
retrained judge, balanced too, with and without the key; R kept; each watch attribute kept,
normalised; kNN overlap / CKA / dCor within S). Beside them, for every release with fewer
distinct vectors than rows, the per-released-vector lookup judge
(:func:`mass.metrics.scores.leakage_floor` on the vector's identity: the majority S per
released vector, cross-validated). One JSON line per dataset x method.

Scaling (``--scaling SET``): the same calibrated model (the set's `mass train` run) applied to
2,000, 10,000 and 50,000 rows drawn from the set's release and fresh rows (the rows beyond
the cut), S judged at each size: a leak that grows with the release shows.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realdata import Dataset, load, write_parquet  # noqa: E402
from realdata_sets import REGISTRY  # noqa: E402

SCALING_ROWS = (2_000, 10_000, 50_000)


def child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def distinct_codes(x: np.ndarray) -> tuple[int, np.ndarray]:
    """(number of distinct rows, each row's code): exact float32 bytes, no rounding (the
    gate's cells, :func:`mass.metrics.certificate.cells_of`)."""
    from mass.metrics.certificate import cells_of

    codes = cells_of(np.asarray(x, np.float32))
    return int(codes.max()) + 1 if len(codes) else 0, codes


def lookup_judge(xp: np.ndarray, y: np.ndarray, policy, preserved=None) -> dict:
    """Distinct released vectors and, when fewer than rows, the cross-validated lookup judge
    (plain and balanced accuracy) against the gate's baselines: the majority rate (chance)
    or, when higher, the lookup from the preserved labels alone, plus the margin."""
    from mass.metrics.scores import chance_level, leakage_floor, majority_rate

    n, codes = distinct_codes(xp)
    out: dict = {"distinct": n, "rows": int(len(xp))}
    if n >= len(xp):
        return out
    kw = dict(folds=policy.folds, seed=policy.seed)
    pres = dict(preserved or {})
    base = max(majority_rate(y), leakage_floor(y, pres, **kw))
    base_bal = max(chance_level(y), leakage_floor(y, pres, balanced=True, **kw))
    acc = leakage_floor(y, {"vector": codes}, **kw)
    bal = leakage_floor(y, {"vector": codes}, balanced=True, **kw)
    margin = min(policy.margins("S").values())
    out.update(lookup=acc, lookup_balanced=bal, majority=base, chance=base_bal,
               ok=bool(acc <= base + margin and bal <= base_bal + margin))  # fmt: skip
    return out


def calibrate(d: Dataset, out: str, budget: float | None) -> tuple[dict, object | None]:
    """`mass train` on the training split; (its row, (modifier, label) or None)."""
    from generalize import calibrate_run

    from mass.modifiers import load_modifier

    train_path = os.path.join(out, "train.parquet")
    write_parquet(train_path, d.ids_train, d.X_train, d.labels_train)
    cpu0 = child_cpu()
    row = calibrate_run(d.spec.name, out, train_path, ["S"], list(d.spec.r), budget, False,
                        len(d.ids_release))  # fmt: skip
    row["calibration_cpu_seconds"] = child_cpu() - cpu0
    if row["rc"] != 0:
        return row, None
    model = load_modifier(os.path.join(out, "run", "modifier.pt"))
    return row, (model, f"{row['chosen']}, noise {row['noise']}")


def _policy(args):
    """params.yaml's audit policy (the gate's), with ``--judge-rows`` / ``--families`` /
    ``--folds`` when given (a budgeted run; every row records what judged it)."""
    from dataclasses import replace

    from mass.audit.policy import load_policy

    policy = load_policy("params.yaml")
    if args.judge_rows:
        policy = replace(policy, max_rows=args.judge_rows)
    if args.families:
        policy = replace(policy, families=tuple(args.families.split(",")))
    if args.folds:
        policy = replace(policy, folds=args.folds)
    return policy


def frozen_s_judge(d: Dataset, seed: int, rows: int | None) -> dict:
    """S's frozen judge (``generalize_table.FrozenJudge``) fitted on at most ``rows`` seeded
    training rows of ``d`` (None: all), as ``judge``'s ``frozen`` argument takes it."""
    from generalize_table import FrozenJudge

    from mass.rows import normalize_rows

    x_tr = normalize_rows(d.X_train)
    keep = np.random.default_rng(seed).permutation(len(x_tr))[:rows]
    return {"S": FrozenJudge(x_tr[keep], d.labels_train["S"][keep], seed)}


def run_one(name: str, args) -> list[dict]:
    import pyarrow as pa
    from generalize_table import dataset, evaluate, releases

    from mass.metrics.certificate import certify
    from mass.noise import row_seeds
    from mass.rows import joint_codes, normalize_rows

    spec, policy = REGISTRY[name], _policy(args)
    d = load(name, max_rows=args.max_rows, cache=args.cache)
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    if args.no_calibration:  # the other methods only (a quick check, never a result row)
        cal_row, cal = {"rc": None, "skipped": "--no-calibration", "leace_noise": None}, None
    else:
        cal_row, cal = calibrate(d, out, args.budget_minutes)
    t0 = time.perf_counter()
    labels = list(d.labels_release)
    sup, pres, watch = ["S"], list(spec.r), [w for w in spec.watch]
    train = dataset(d.X_train, {a: d.labels_train[a] for a in sup + pres})
    xt = normalize_rows(d.X_release).astype(np.float32)
    y = d.labels_release
    xs = releases(train, xt, row_seeds(pa.array(d.ids_release)), joint_codes({"S": y["S"]}),
                  sup, pres, cal, cal_row.get("leace_noise"))  # fmt: skip
    frozen = frozen_s_judge(d, policy.seed, policy.max_rows)
    judged = evaluate(xt, xs, {k: y[k] for k in labels}, sup, pres, watch, policy, frozen)
    head = {"dataset": name, "package": spec.package, "licence": spec.licence,
            "kind": spec.kind, "S_name": spec.s, "R_names": list(spec.r),
            "watch_reasons": spec.watch,
            "rows": len(d.ids_train) + len(d.ids_release), "train_rows": len(d.ids_train),
            "release_rows": len(d.ids_release), "fresh_rows": len(d.ids_fresh),
            "dim": int(d.X_train.shape[1]), "data_note": d.note, "judge_rows": policy.max_rows,
            "folds": policy.folds, "families": list(policy.families),
            "calibration": cal_row}  # fmt: skip
    rows = []
    for method, row in judged.items():
        xp, xd, _ = xs[method]
        pres_y = {r: y[r] for r in pres}
        row["lookup"] = lookup_judge(xp, y["S"], policy, pres_y)
        row["lookup_key"] = (lookup_judge(xd, y["S"], policy, pres_y) if xd is not xp
                             else row["lookup"])  # fmt: skip
        row["certificate"] = certify(xd, y["S"], confidence=policy.confidence).to_dict()
        rows.append({**head, "method": method, **row})
    rows[-1]["judge_seconds"] = time.perf_counter() - t0
    return rows


def scaling(name: str, args) -> list[dict]:
    """The calibrated model of ``name`` (its run under ``--out``, trained if absent) on
    releases of :data:`SCALING_ROWS` rows from the release + fresh rows."""
    import pyarrow as pa
    from generalize_table import strip_noise

    from mass.calibrate import apply
    from mass.metrics import attribute_report
    from mass.metrics.certificate import certify
    from mass.modifiers import load_modifier
    from mass.noise import row_seeds
    from mass.rows import normalize_rows

    spec, policy = REGISTRY[name], _policy(args)
    d = load(name, max_rows=args.max_rows, cache=args.cache)
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "run", "modifier.pt")
    cal_row = {"chosen": "existing run"}
    if not os.path.exists(path):
        cal_row, _ = calibrate(d, out, args.budget_minutes)
        if cal_row["rc"] != 0:
            return [{"dataset": name, "scaling": True, "calibration": cal_row}]
    model = load_modifier(path)
    pool_x = np.vstack([d.X_release, d.X_fresh])
    pool_ids = np.concatenate([d.ids_release, d.ids_fresh])
    pool_y = {k: np.concatenate([d.labels_release[k], d.labels_fresh[k]])
              for k in ("S", *spec.r, *spec.watch)}  # fmt: skip
    rng = np.random.default_rng(policy.seed)
    rows = []
    for n in [k for k in SCALING_ROWS if k <= len(pool_ids)]:
        pick = np.sort(rng.permutation(len(pool_ids))[:n])
        x = normalize_rows(pool_x[pick]).astype(np.float32)
        seeds = row_seeds(pa.array(pool_ids[pick]))
        xd = apply(strip_noise(model), x, seeds)  # S judged with the key stripped
        kw = dict(families=policy.families, folds=policy.folds, seed=policy.seed,
                  max_rows=policy.max_rows, confidence=policy.confidence, curve=False)  # fmt: skip
        pres = {r: pool_y[r][pick] for r in spec.r}
        rep = attribute_report("S", pool_y["S"][pick], x, xd, role="suppressed",
                               preserved=pres, margins=policy.margins("S"), **kw)  # fmt: skip
        worst = max(rep.ci_high, key=lambda j: rep.ci_high[j] - rep.baseline)
        rows.append({"dataset": name, "scaling": True, "release_rows": n,
                     "chosen": cal_row.get("chosen"), "judge_rows": policy.max_rows,
                     "S_key": {"worst_judge": worst, "ci_high": rep.ci_high[worst],
                               "limit": rep.baseline + rep.margins[worst], "ok": rep.passed,
                               "balanced_ci_high": max(rep.balanced_ci_high.values()),
                               "balanced_baseline": rep.balanced_baseline},
                     "lookup_key": lookup_judge(xd, pool_y["S"][pick], policy, pres),
                     "certificate": certify(xd, pool_y["S"][pick],
                                            confidence=policy.confidence).to_dict(),
                     "R_kept": _kept(x, xd, pres, policy),
                     **_watch(x, xd, {w: pool_y[w][pick] for w in spec.watch},
                              pool_y["S"][pick], policy)})  # fmt: skip
    return rows


def _kept(x, xd, pres: dict, policy) -> dict:
    """Each R's best retrained accuracy on the release over its original (the gate's
    families, at most ``policy.max_rows`` seeded rows)."""
    from mass.metrics import attack_predictions
    from mass.rows import seeded_rows

    keep = seeded_rows(len(x), policy.max_rows, policy.seed)
    rows = np.arange(len(x)) if keep is None else keep
    out = {}
    for r, y in pres.items():
        acc = []
        for rel in (x, xd):
            preds = attack_predictions(rel[rows], y[rows], families=policy.families,
                                       folds=min(policy.folds, 5), seed=policy.seed)  # fmt: skip
            acc.append(max(float((p[1.0] == y[rows]).mean()) for p in preds.values()))
        out[r] = round(acc[1] / max(acc[0], 1e-9), 4)
    return out


def _watch(x, xd, watch: dict, s, policy) -> dict:
    """Each watch attribute's normalised information kept, read as the audit reads it
    (mass.metrics.unnamed.watch_report: the frozen reader too, the policy's watch_repeats
    fold orders): ``watch_kept`` the audit's figure (the lower of the two readings),
    ``watch_retrained_kept`` the retrained families' alone."""
    from mass.metrics.rules import FROZEN_READER
    from mass.metrics.unnamed import watch_report

    rep = watch_report(x, xd, watch, {"S": s}, seed=policy.seed, max_rows=policy.max_rows,
                       families=policy.families, folds=min(policy.folds, 5),
                       frozen=FROZEN_READER, repeats=policy.watch_repeats)  # fmt: skip

    def rounded(key: str) -> dict:
        return {w: (None if v.get(key) is None else round(v[key], 4)) for w, v in rep.items()}

    return {"watch_kept": rounded("kept"), "watch_retrained_kept": rounded("retrained_kept")}


def dependence(names: list[str]) -> list[dict]:
    """Cramér's V of R and each watch attribute with S on the whole loaded set (labels only,
    no embedding): the numbers docs/realdata.md quotes beside the choices."""
    from realdata_sets import LOADERS

    from mass.metrics.unnamed import cramers_v

    out = []
    for name in names:
        lab, spec = LOADERS[name]().labels, REGISTRY[name]
        v = {a: round(cramers_v(lab[a], lab["S"]), 3) for a in (*spec.r, *spec.watch)}
        out.append({"dataset": name, "rows": len(lab["S"]),
                    "S_classes": np.bincount(lab["S"]).tolist(), "cramers_v": v})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    from realdata_table import markdown

    ap = argparse.ArgumentParser(description="mass bench realdata: real public data, every "
                                 "method side by side (issue 34)")  # fmt: skip
    ap.add_argument("--out", default="reports/realdata")
    ap.add_argument("--only", help="comma-separated subset of " + ",".join(REGISTRY))
    ap.add_argument("--budget-minutes", type=float, help="passed to mass train")
    ap.add_argument("--max-rows", type=int, help="cut each set to this many rows (default "
                    "50,000)")  # fmt: skip
    ap.add_argument("--judge-rows", type=int, help="attackers' row cap (default: the policy's)")
    ap.add_argument("--families", help="attacker families, comma-separated (default: the "
                    "policy's)")  # fmt: skip
    ap.add_argument("--folds", type=int, help="cross-validation folds (default: the policy's)")
    ap.add_argument("--scaling", metavar="SET", help="also the scaling run on SET (e.g. words)")
    ap.add_argument("--scaling-only", action="store_true",
                    help="with --scaling: only the scaling run (no side-by-side table)")  # fmt: skip
    ap.add_argument(
        "--no-calibration",
        action="store_true",
        help="skip `mass train` (no calibrated row; a quick check of the rest)",
    )
    ap.add_argument("--cache", default="reports/realdata/cache", help="text embedding cache")
    ap.add_argument("--render", nargs="+", metavar="JSONL", help="only print the Markdown")
    ap.add_argument(
        "--dependence",
        action="store_true",
        help="only print each set's Cramér's V of R and watch with S (JSON lines)",
    )
    args = ap.parse_args(argv)
    if args.dependence:
        for row in dependence(args.only.split(",") if args.only else list(REGISTRY)):
            print(json.dumps(row))
        return 0
    if args.render:
        print(markdown([json.loads(x) for p in args.render for x in open(p) if x.strip()]))
        return 0
    names = args.only.split(",") if args.only else list(REGISTRY)
    if args.scaling_only:
        if not args.scaling:
            ap.error("--scaling-only needs --scaling SET")
        names = []
    bad = [n for n in names + ([args.scaling] if args.scaling else []) if n not in REGISTRY]
    if bad:
        ap.error(f"--only/--scaling: unknown dataset(s) {bad}; choose from {list(REGISTRY)}")
    os.makedirs(args.out, exist_ok=True)
    rows: list[dict] = []
    jobs = [(run_one, n) for n in names] + ([(scaling, args.scaling)] if args.scaling else [])
    with open(os.path.join(args.out, "results.jsonl"), "w") as f:
        for fn, name in jobs:
            for row in fn(name, args):
                rows.append(row)
                f.write(json.dumps(row, default=float) + "\n")
                f.flush()
    md = markdown(rows)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 0
