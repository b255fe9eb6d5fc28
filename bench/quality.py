"""Suppression/preservation quality of MaSS on coloured MNIST-5k (= `mass bench quality`).

Reproduces the structure of the paper's Tables 2, 8 and 9 (loss ablation, each attribute
suppressed in turn, a w^{r*} sweep) plus the generative-filter paper's two MNIST cases, for
the faithful and adaptive modes. Every row reports, per attribute: original accuracy (best
retrained classifier on x), frozen-model accuracy on x', worst-case (best) retrained attacker
on x', majority rate and, for suppressed attributes, the leakage floor (accuracy of predicting
s from the preserved labels alone). Attackers are retrained on x'(train), scored on x'(test).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/quality.py`: import bench/ and mass/ from here
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench import entry

log = logging.getLogger(__name__)
ATTRS = ("digit", "colour", "parity", "ge5", "circle")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-root", default="data", help="root of coloured MNIST features cache")
    p.add_argument("--features", help="directory with {train,test}.parquet (or train/, test/) features to use "
                   "as-is (skips the coloured MNIST cache check)")  # fmt: skip
    p.add_argument("--out", default="bench/results/quality", help="output prefix (.json, .md)")
    p.add_argument("--modes", default="faithful,adaptive")
    p.add_argument("--groups", default="ablation,sweep,genfilter,targets",
                   help="row groups: ablation, sweep, genfilter, targets, ingredients")  # fmt: skip
    p.add_argument("--adaptive-params", default=None,
                   help="YAML whose train: section (e.g. params.yaml, the demo's measured "
                   "settings) is the base of every adaptive-mode row; faithful rows keep the "
                   "code defaults (Table 7)")  # fmt: skip
    p.add_argument("--only", default=None, help="run only rows whose name contains this text")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--attackers", default="logreg,mlp")
    p.add_argument("--quick", action="store_true", help="1000 train / 500 test rows, 8 epochs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is fastest on busy CPUs)"
    )


def subset(ds, n: int, seed: int):
    """First ``n`` rows of a seeded permutation (all rows when n >= len)."""
    if n >= len(ds):
        return ds
    idx = np.sort(np.random.default_rng(seed).permutation(len(ds))[:n])
    import pyarrow as pa

    return dataclasses.replace(ds, ids=ds.ids.take(pa.array(idx)), x=ds.x[idx],
                               labels={k: v[idx] for k, v in ds.labels.items()})  # fmt: skip


def evaluate(modifier, branches, train, test, suppress, preserve, *, families, attrs=None):
    """One row of the tables: per attribute the accuracies described in the module doc."""
    from mass import metrics as M
    from mass.branch_models import LogitsOnly
    from mass.modifiers import modify
    from mass.noise import row_seeds
    from mass.rows import normalize_rows

    xtr, xte = normalize_rows(train.x), normalize_rows(test.x)
    # public row_seeds: benchmark only (nothing published; attackers do not use seeds)
    mtr = modify(modifier, xtr, row_seeds(train.ids))
    mte = modify(modifier, xte, row_seeds(test.ids))
    out = {}
    for a in attrs or tuple(suppress) + tuple(preserve):
        ytr, yte = train.labels[a], test.labels[a]
        orig = M.retrained_attackers(xtr, ytr, xte, yte, families=families)
        mod = M.retrained_attackers(mtr, ytr, mte, yte, families=families)
        row = {
            "role": "suppress" if a in suppress else "preserve" if a in preserve else "other",
            "majority": M.majority_rate(yte),
            "original": max(orig.values()),
            "frozen_x": M.frozen_accuracy(LogitsOnly(branches.classifiers[a]), xte, yte),
            "frozen_xmod": M.frozen_accuracy(LogitsOnly(branches.classifiers[a]), mte, yte),
            "retrained_xmod": mod,
            "worst_xmod": max(mod.values()),
        }
        if a in suppress:
            prs = {r: test.labels[r] for r in preserve}
            row["floor"] = M.leakage_floor(yte, prs) if prs else row["majority"]
        out[a] = row
    return out


def verdict(rows: dict) -> dict:
    """Targets of the brief: frozen protocol and worst retrained attacker protocol."""
    ok_frozen, ok_retrained = True, True
    for r in rows.values():
        if r["role"] == "suppress":
            ok_frozen &= r["frozen_xmod"] <= r["majority"] + 0.02
            ok_retrained &= r["worst_xmod"] <= max(r["majority"], r["floor"]) + 0.05
        elif r["role"] == "preserve":
            ok_frozen &= r["frozen_xmod"] >= 0.95 * r["frozen_x"]
            ok_retrained &= r["worst_xmod"] >= 0.90 * r["original"]
    return {"frozen_ok": bool(ok_frozen), "retrained_ok": bool(ok_retrained)}


def plan(groups: tuple[str, ...]) -> list[dict]:
    """The rows: name, suppress, preserve (known to training), report (preserved attributes
    evaluated, known to training or not) and param overrides."""
    rows = []

    def row(group, name, s, r, known, params):
        return {"group": group, "name": name, "suppress": [s], "preserve": [r] if known else [],
                "report": [r], "params": params}  # fmt: skip

    if "ablation" in groups:
        for s, r in (("colour", "digit"), ("digit", "colour")):
            rows += [
                row("ablation", f"{s}: L_rec+L^s", s, r, False, {"w_rstar": 0.0}),
                row("ablation", f"{s}: +L^r*", s, r, False, {}),
                row("ablation", f"{s}: +L^r*+L^r", s, r, True, {}),
            ]
    if "sweep" in groups:
        for w in (10, 20, 40, 80, 160):
            rows.append(row("sweep", f"colour: w_r*={w}", "colour", "digit", False,
                            {"w_rstar": float(w)}))  # fmt: skip
    if "ingredients" in groups:  # what each adaptive ingredient buys (mode fixed per row)
        off = {"adversaries": [], "noise_dim": 0, "match": "none"}
        for name, ad in (
            ("faithful", None),
            ("adversaries only", {**off, "adversaries": ["linear", "mlp"]}),
            ("stochastic only", {**off, "noise_dim": 16}),
            ("matching only", {**off, "match": "mmd"}),
            ("adaptive default", {}),
        ):
            params = {"mode": "faithful"} if ad is None else {"mode": "adaptive", "adaptive": ad}
            r = row("ingredients", f"ge5 | parity,circle: {name}", "ge5", "parity", True, params)
            r["preserve"] = r["report"] = ["parity", "circle"]
            r["fixed_mode"] = True
            rows.append(r)
    if "targets" in groups:  # the targets: each direction, both preservation variants
        for s, r in (("colour", "digit"), ("digit", "colour")):
            rows += [
                row("targets", f"{s} | {r}: agnostic only (w_r*=40)", s, r, False,
                    {"w_rstar": 40.0}),
                row("targets", f"{s} | {r}: attribute-specific (w_r*=0)", s, r, True,
                    {"w_rstar": 0.0}),
                row("targets", f"{s} | {r}: both (w_r*=40)", s, r, True, {"w_rstar": 40.0}),
            ]  # fmt: skip
        # what closes colour -> digit (README "Measured privacy"): quadratic LEACE before G
        pre = row(
            "targets",
            "colour | digit: attribute-specific + quadratic pre-erasure, output noise 0.03",
            "colour",
            "digit",
            True,
            {"w_rstar": 0.0, "adaptive": {"pre_erase": "quadratic", "output_noise": 0.03}},
        )
        rows.append({**pre, "only_mode": "adaptive"})  # fmt: skip
    if "genfilter" in groups:
        rows += [
            row("genfilter", "digit | circle", "digit", "circle", True, {}),
            row("genfilter", "ge5 | parity", "ge5", "parity", True, {}),
        ]
    return rows


def run(args: argparse.Namespace) -> int:
    import torch

    from mass.config import MassConfig
    from mass.demo.features import coloured_mnist_features
    from mass.io import load_embeddings
    from mass.methods.mass import fit_mass, normalize_rows, pretrain_branches

    torch.set_num_threads(args.threads)
    if args.features:
        # the cache writes SPLIT.parquet, the DVC pipeline's extract stage SPLIT/ part files
        paths = {}
        for s in ("train", "test"):
            single = os.path.join(args.features, f"{s}.parquet")
            paths[s] = single if os.path.exists(single) else os.path.join(args.features, s)
    else:
        paths = coloured_mnist_features(args.data_root)
    train = load_embeddings(paths["train"], label_cols=list(ATTRS))
    test = load_embeddings(paths["test"], label_cols=list(ATTRS), encodings=train.encodings)
    epochs = args.epochs
    if args.quick:
        train, test, epochs = subset(train, 1000, args.seed), subset(test, 500, args.seed), 8
    families = tuple(a for a in args.attackers.split(",") if a)
    base = {"epochs": epochs, "seed": args.seed}
    if args.quick:
        base.update(branch_epochs=10, agnostic_epochs=10)
    adaptive_base = dict(base)
    if args.adaptive_params:
        adaptive_base = {**adaptive_params(args.adaptive_params), **base}
    t0 = time.perf_counter()
    ncls = {a: train.num_classes(a) for a in ATTRS}
    cfg0 = MassConfig.from_dict({**base, "suppress": ["digit"]})
    branches = pretrain_branches(normalize_rows(train.x), train.labels, ncls, cfg0,
                                 attributes=ATTRS, agnostic=True)  # fmt: skip
    branch_seconds = time.perf_counter() - t0
    results = []
    for i, mode in enumerate(m for m in args.modes.split(",") if m):
        for row in plan(tuple(args.groups.split(","))):
            if row.get("fixed_mode") and i > 0 or row.get("only_mode", mode) != mode:
                continue
            if args.only and args.only not in row["name"]:
                continue
            b = adaptive_base if mode == "adaptive" and not row.get("fixed_mode") else base
            params = {**b, "mode": mode, **row["params"]}
            if "adaptive" in b and "adaptive" in row["params"]:  # a row changes some of them
                params["adaptive"] = {**b["adaptive"], **row["params"]["adaptive"]}
            cfg = MassConfig.from_dict(params, suppress=row["suppress"], preserve=row["preserve"])
            res = fit_mass(train, cfg, branches=branches, progress=False)
            ev = evaluate(res.modifier, branches, train, test, row["suppress"], row["report"],
                          families=families)  # fmt: skip
            secs = [h["seconds"] for h in res.history]
            rec = {**row, "mode": cfg.mode, "attributes": ev, **verdict(ev),
                   "epoch_seconds": float(np.mean(secs)), "epochs": len(secs)}  # fmt: skip
            results.append(rec)
            log.info("%s %s: %s", mode, row["name"], _short(ev))
    report = {"rows_train": len(train), "rows_test": len(test), "branch_seconds": branch_seconds,
              "attackers": list(families), "adaptive_params": args.adaptive_params,
              "adaptive_base": adaptive_base, "results": results}  # fmt: skip
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=2)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(report))
    print(markdown(report))
    return 0


def adaptive_params(path: str) -> dict:
    """The ``train:`` section of a params file, without what each row sets itself."""
    from mass.config import read_yaml

    train = dict(read_yaml(path, flag="--params").get("train") or {})
    for key in ("suppress", "preserve", "method", "mode", "seed", "epochs"):
        train.pop(key, None)
    return train


def _short(ev: dict) -> str:
    return ", ".join(f"{a}[{r['role'][0]}] fz={r['frozen_xmod']:.2f} wr={r['worst_xmod']:.2f}"
                     for a, r in ev.items())  # fmt: skip


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # row names like "digit | circle" inside a table


def markdown(report: dict) -> str:
    lines = [
        f"# MaSS quality on coloured MNIST-5k ({report['rows_train']} train / "
        f"{report['rows_test']} test rows; attackers: {', '.join(report['attackers'])})",
        "",
        "Faithful rows: code defaults (the paper's Table 7). Adaptive rows: "
        + (
            f"the train: section of `{report['adaptive_params']}` as base."
            if report.get("adaptive_params")
            else "code defaults."
        ),
        "",
        "| mode | row | attribute | role | original | frozen x | frozen x' | worst retrained x' "
        "| majority | floor | frozen ok | retrained ok | s/epoch |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        for a, v in r["attributes"].items():
            floor = f"{v['floor']:.3f}" if "floor" in v else ""
            lines.append(
                f"| {r['mode']} | {_cell(r['name'])} | {a} | {v['role']} | {v['original']:.3f} | "
                f"{v['frozen_x']:.3f} | {v['frozen_xmod']:.3f} | {v['worst_xmod']:.3f} | "
                f"{v['majority']:.3f} | {floor} | {r['frozen_ok']} | {r['retrained_ok']} | "
                f"{r['epoch_seconds']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return entry.main(__file__, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
