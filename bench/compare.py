"""Every method on the same features and splits, side by side (= `mass bench compare`).

In the form of the MaSS paper's Tables 5 and 6: per task (suppress s, preserve p) one row per
method with, on the held-out split, the frozen-model accuracy (judges trained once on the
original features), the worst retrained attacker (max over :data:`mass.metrics.ATTACKER_FAMILIES`)
on s, the best retrained utility classifier on p and on the other labelled attributes, the
reconstruction attack (:mod:`mass.reconstruction`), a kNN estimate of I(release; s), AUM and the
fitting time. Writes ``compare.json``, ``compare.md`` and ``compare.png`` under ``--out``.

Raw-domain rows (Gaussian blur, downsampling, masking of the image, then re-extracted with the
same CNN extractor) are heuristics on images, not modifiers of embeddings: they cannot be
exported or served by the embedding pipeline and appear here only as reference rows.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/compare.py`: import bench/ and mass/ from here
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from bench import entry
from bench.compare_raw import raw_baselines
from bench.compare_report import write_json, write_markdown, write_plot
from mass.errors import ConfigError
from mass.io import EmbeddingDataset
from mass.noise import row_seeds

log = logging.getLogger(__name__)

# (row label, method, params, quick overrides)
METHOD_ROWS = [
    ("mass faithful", "mass", {"mode": "faithful"},
     {"epochs": 2, "branch_epochs": 2, "agnostic_epochs": 2}),
    ("mass adaptive", "mass", {"mode": "adaptive"},
     {"epochs": 2, "branch_epochs": 2, "agnostic_epochs": 2}),
    ("gaussian sigma=0.5", "gaussian", {"sigma": 0.5}, {}),
    ("gaussian sigma=1.0", "gaussian", {"sigma": 1.0}, {}),
    ("gaussian_budget", "gaussian_budget", {"budget": 20.0}, {"vae_epochs": 4}),
    ("genfilter", "genfilter", {"budget": 20.0}, {"vae_epochs": 4, "filter_epochs": 4}),
    ("unlearning", "unlearning", {}, {"epochs": 3}),
    ("end", "end", {}, {"epochs": 3}),
    ("leace", "leace", {}, {}),
    ("leace_quadratic", "leace_quadratic", {}, {}),
    ("inlp", "inlp", {}, {"iterations": 4}),
]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="reports/compare", help="output directory")
    parser.add_argument("--features", help="DIR with {train,val,test} embedding Parquet")
    parser.add_argument(
        "--data-root",
        default="data",
        help="coloured-MNIST cache (raw/, extractor/, features/), built if missing",
    )
    parser.add_argument(
        "--tasks",
        default="colour:digit,digit:colour",
        help="comma list of SUPPRESS:PRESERVE (attributes joined by +)",
    )
    parser.add_argument("--methods", help="comma list of row labels or method names (default all)")
    parser.add_argument(
        "--extractor-epochs",
        type=int,
        help="SimCLR epochs when the cache is built (default: the cache's own)",
    )
    parser.add_argument("--no-raw-baselines", action="store_true", help="skip image-domain rows")
    parser.add_argument("--synthetic", action="store_true", help="tiny synthetic data (smoke)")
    parser.add_argument("--quick", action="store_true", help="subsample and few epochs (smoke)")
    parser.add_argument("--max-rows", type=int, default=2000, help="rows per attacker fit")
    parser.add_argument(
        "--families", help="attacker families, comma list (default: all; --quick: logreg,knn)"
    )
    parser.add_argument(
        "--attributes",
        help="attributes to score, comma list (default: all labelled; include the task ones)",
    )
    parser.add_argument(
        "--mass-params",
        help="also run MaSS with the train: section of this YAML (e.g. params.yaml: the "
        "demo's measured settings) as the row 'mass adaptive (FILE)'",
    )
    parser.add_argument(
        "--raw",
        help="with --features: DIR of raw {train,val,test}.parquet images (mass prepare's "
        "output) for the raw-domain rows; needs --extractor",
    )
    parser.add_argument("--extractor", help="with --raw: the extractor.pt that made --features")
    parser.add_argument("--seed", type=int, default=0)


def parse_tasks(spec: str) -> list[tuple[list[str], list[str]]]:
    tasks = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        s, sep, p = part.partition(":")
        if not sep or not s:
            raise ConfigError(f"--tasks {part!r}: expected SUPPRESS:PRESERVE, e.g. colour:digit")
        tasks.append((s.split("+"), [a for a in p.split("+") if a]))
    return tasks


def selected_rows(spec: str | None, mass_params: str | None = None) -> list[tuple]:
    all_rows = list(METHOD_ROWS)
    if mass_params:
        from bench.quality import adaptive_params

        params = {"mode": "adaptive", **adaptive_params(mass_params)}
        quick = {"epochs": 2, "branch_epochs": 2, "agnostic_epochs": 2}
        label = f"mass adaptive ({os.path.basename(mass_params)})"
        all_rows.insert(2, (label, "mass", params, quick))
    if not spec:
        return all_rows
    wanted = {w.strip() for w in spec.split(",")}
    rows = [r for r in all_rows if r[0] in wanted or r[1] in wanted]
    unknown = wanted - {r[0] for r in rows} - {r[1] for r in rows} - {"original", "raw"}
    if unknown:
        raise ConfigError(
            f"--methods: unknown {sorted(unknown)}; known: {[r[0] for r in all_rows]}"
        )
    return rows


@torch.no_grad()
def release(modifier: torch.nn.Module, ds: EmbeddingDataset) -> np.ndarray:
    # Public row_seeds: a benchmark's in-memory release, never published; its attackers do
    # not use seeds, so the figures equal those of a keyed release.
    seeds = torch.as_tensor(row_seeds(ds.ids))
    x = torch.as_tensor(np.ascontiguousarray(ds.x, dtype=np.float32))
    return np.concatenate([modifier(x[i : i + 4096], seeds[i : i + 4096]).numpy()
                           for i in range(0, len(x), 4096)])  # fmt: skip


def evaluate(name, family, x_tr, x_te, train, test, judges, args, seconds) -> dict:
    """Every metric of one release, for every labelled attribute (roles come later)."""
    from mass import metrics
    from mass.methods._common import knn_mutual_information
    from mass.reconstruction import reconstruction_attack

    families = tuple(args.families.split(",")) if args.families else (
        ("logreg", "knn") if args.quick else metrics.ATTACKER_FAMILIES)  # fmt: skip
    row = {"method": name, "family": family, "seconds": seconds, "attributes": {}}
    keep = slice(0, min(len(x_te), 1000))
    for attr, y_tr in train.labels.items():
        if args.attributes and attr not in args.attributes.split(","):
            continue
        y_te = test.labels[attr]
        acc = metrics.retrained_attackers(x_tr, y_tr, x_te, y_te, families=families,
                                          seed=args.seed, max_rows=args.max_rows)  # fmt: skip
        row["attributes"][attr] = {
            "frozen": metrics.frozen_accuracy(judges[attr], x_te, y_te),
            "attackers": acc,
            "max": max(acc.values()),
            "majority": metrics.majority_rate(y_te),
            "mi_knn": knn_mutual_information(x_te[keep], y_te[keep]),
        }
    rec = reconstruction_attack(x_tr, unit(train.x), x_te, unit(test.x),
                                epochs=5 if args.quick else 40, seed=args.seed)  # fmt: skip
    row["reconstruction"] = rec.to_dict()
    log.info("%s evaluated", name)
    return row


def tag(row: dict, suppress: list[str], preserve: list[str]) -> dict:
    """A copy of ``row`` with each attribute's role, the MI of s and AUM for this task."""
    from mass import metrics

    row = json.loads(json.dumps(row, default=float))
    for attr, v in row["attributes"].items():
        v["role"] = "suppress" if attr in suppress else "preserve" if attr in preserve else "other"
    row["mi_suppressed"] = {s: row["attributes"][s]["mi_knn"] for s in suppress}
    if preserve:
        row["aum"] = metrics.aum(row["attributes"][suppress[0]]["max"],
                                 row["attributes"][preserve[0]]["max"])  # fmt: skip
    return row


def run_task(suppress, preserve, splits, judges, shared_rows, args, on_row=None) -> list[dict]:
    """The method rows of one task (fitted for it) after the task-independent shared rows."""
    from mass.methods import get_method

    train, test = splits["train"], splits["test"]
    rows = [tag(r, suppress, preserve) for r in shared_rows[:1]]
    for label, method, params, quick in selected_rows(
        args.methods, getattr(args, "mass_params", None)
    ):
        params = {**params, **(quick if args.quick else {})}
        t0 = time.perf_counter()
        torch.manual_seed(args.seed)
        fit = get_method(method).fit(train, suppress=list(suppress), preserve=list(preserve),
                                     params=params, val=splits.get("val"), seed=args.seed,
                                     progress=False)  # fmt: skip
        seconds = time.perf_counter() - t0
        log.info("%s fitted in %.1fs", label, seconds)
        row = evaluate(label, method, release(fit.modifier, train), release(fit.modifier, test),
                       train, test, judges, args, seconds)  # fmt: skip
        row["params"] = params
        row["extra"] = {k: v for k, v in fit.extra.items() if isinstance(v, int | float | str | dict)
                        and k not in ("config", "branches_obj")}  # fmt: skip
        rows.append(tag(row, suppress, preserve))
        if on_row is not None:  # partial reports survive an interrupted long run
            on_row(rows)
    rows += [tag(r, suppress, preserve) for r in shared_rows[1:]]
    return rows


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    os.makedirs(args.out, exist_ok=True)
    splits, images, extractor = load_data(args)
    tasks = parse_tasks(args.tasks if not args.synthetic or ":" in args.tasks else "a:b")
    if args.synthetic and args.tasks == "colour:digit,digit:colour":
        tasks = [(["a"], ["b"])]
    for s, p in tasks:
        for attr in [*s, *p]:
            if attr not in splits["train"].labels:
                raise ConfigError(
                    f"--tasks: attribute {attr!r} not in the data "
                    f"(labels: {sorted(splits['train'].labels)})"
                )
    if args.attributes:
        missing = {a for t in tasks for a in [*t[0], *t[1]]} - set(args.attributes.split(","))
        if missing:
            raise ConfigError(f"--attributes: add the task attribute(s) {sorted(missing)}")
    scored = args.attributes.split(",") if args.attributes else list(splits["train"].labels)
    judges = frozen_judges(splits["train"], scored, epochs=3 if args.quick else 30, seed=args.seed)
    train, test = splits["train"], splits["test"]
    shared = [evaluate("original", "original", unit(train.x), unit(test.x), train, test, judges,
                       args, 0.0)]  # fmt: skip
    if images is not None and not args.no_raw_baselines:  # task-independent: evaluated once
        for label, (x_tr, x_te, secs) in raw_baselines(images, extractor).items():
            shared.append(evaluate(label, "raw", x_tr, x_te, train, test, judges, args, secs))
    report = {"config": {k: v for k, v in vars(args).items() if not k.startswith("_") and
                         isinstance(v, str | int | float | bool | type(None))},
              "n": {k: len(v) for k, v in splits.items()}, "tasks": []}  # fmt: skip
    for s, p in tasks:
        log.info("task: suppress %s preserve %s", s, p)
        task = {"suppress": s, "preserve": p, "rows": []}
        report["tasks"].append(task)

        def flush(rows, task=task):
            task["rows"] = rows
            write_json(report, os.path.join(args.out, "compare.json"))
            write_markdown(report, os.path.join(args.out, "compare.md"))

        task["rows"] = run_task(s, p, splits, judges, shared, args, on_row=flush)
    write_json(report, os.path.join(args.out, "compare.json"))
    write_markdown(report, os.path.join(args.out, "compare.md"))
    write_plot(report, os.path.join(args.out, "compare.png"))
    print(json.dumps({"out": args.out, "tasks": len(report["tasks"])}))
    return 0


# ---------------------------------------------------------------- data and judges


def unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(n > 0, n, 1.0)).astype(np.float32)


def _split_rows(n: int, seed: int) -> dict[str, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    a, b = int(0.6 * n), int(0.8 * n)
    return {"train": np.sort(perm[:a]), "val": np.sort(perm[a:b]), "test": np.sort(perm[b:])}


def _quick_cut(n: int, split: str, quick: bool) -> np.ndarray:
    """All rows, or (--quick) a seeded random subset: files may be sorted by a label."""
    limit = {"train": 600, "val": 200, "test": 300}[split] if quick else n
    if limit >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(1234).choice(n, size=limit, replace=False))


def load_data(args):
    """(splits, raw images per split or None, extractor or None); see ``add_arguments``."""
    from mass.methods._common import subset, toy_dataset

    if args.synthetic:
        n = 500 if args.quick else 3000
        full = toy_dataset(
            n, dim=16 if args.quick else 64, classes={"a": 4, "b": 3, "c": 2}, seed=args.seed
        )
        return {k: subset(full, r) for k, r in _split_rows(n, args.seed).items()}, None, None
    from mass.demo import features
    from mass.demo.coloured_mnist import read_split
    from mass.demo.extractor import DEFAULT_EPOCHS, load_extractor

    if args.features:
        splits = _load_features(args.features, args.quick)
        if not args.raw:
            return splits, None, None
        if not args.extractor:
            raise ConfigError("--raw needs --extractor (the model that made --features)")
        raw = {k: os.path.join(args.raw, f"{k}.parquet") for k in splits}
        return splits, _aligned_images(splits, raw, read_split), load_extractor(args.extractor)

    # The shared cache (ROOT/raw, ROOT/extractor, ROOT/features); a --quick run builds its own
    # under --out with a 2-epoch extractor so it never replaces the full-run cache.
    root = os.path.join(args.out, "data") if args.quick else args.data_root
    epochs = args.extractor_epochs or (2 if args.quick else DEFAULT_EPOCHS)
    paths = features.coloured_mnist_features(root, seed=args.seed, epochs=epochs)
    splits = _load_features(os.path.join(root, "features"), args.quick)
    raw = {k: os.path.join(root, "raw", f"{k}.parquet") for k in splits}
    return splits, _aligned_images(splits, raw, read_split), load_extractor(paths["extractor"])


def _aligned_images(splits: dict, raw: dict[str, str], read_split) -> dict[str, np.ndarray]:
    """Raw images of each split in the row order of its features (matched by id)."""
    images = {}
    for k, ds in splits.items():
        ids, imgs, _ = read_split(raw[k])
        where = {int(i): j for j, i in enumerate(ids)}
        missing = [int(i) for i in ds.ids.to_numpy() if int(i) not in where]
        if missing:
            raise ConfigError(f"{raw[k]}: no image for feature id(s) {missing[:5]}")
        images[k] = imgs[[where[int(i)] for i in ds.ids.to_numpy()]]
    return images


def _load_features(root: str, quick: bool) -> dict[str, EmbeddingDataset]:
    import pyarrow.parquet as pq

    from mass.io import expand_paths, load_embeddings
    from mass.methods._common import subset

    out, enc = {}, None
    for k in ("train", "val", "test"):
        spec = os.path.join(root, k)
        spec = spec if os.path.exists(spec) else spec + ".parquet"
        schema = pq.read_schema(expand_paths(spec)[0])
        cols = [
            f.name
            for f in schema
            if f.name not in ("id", "emb")
            and str(f.type).startswith(("int", "uint", "string", "large_string"))
        ]
        ds = load_embeddings(spec, label_cols=cols, encodings=enc)
        enc = enc or ds.encodings
        out[k] = subset(ds, _quick_cut(len(ds), k, quick))
    return out


def frozen_judges(train: EmbeddingDataset, attrs: list[str], *, epochs: int, seed: int) -> dict:
    """One classifier per attribute trained on the original features (the 'frozen model')."""
    from mass.branches import train_classifier
    from mass.methods._common import n_classes

    x = unit(train.x)
    return {a: train_classifier(x, y, n_classes(train, a), epochs=epochs, seed=seed + i).eval()
            for i, (a, y) in enumerate((a, train.labels[a]) for a in attrs)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return entry.main(__file__, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
