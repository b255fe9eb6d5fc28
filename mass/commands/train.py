"""Train a data modifier on embedding Parquet and write a run directory.

Without --config, --mode or --method, training *calibrates* (mass.calibrate,
docs/calibration.md): it searches a small space of methods and noise levels for the
configuration with the best utility whose validation audit meets the policy (--policy or
params.yaml's `audit:` section), writes RUN_DIR/calibration.json and calibration.png, and
exits 2 with the measured frontier when nothing passes. An explicit config trains exactly
what it says.

RUN_DIR gets modifier.pt, branches.pt, config.yaml (resolved), encodings.json and
metrics.json (train seconds, per-epoch seconds; with --val the audit of each attribute:
majority rate, frozen accuracy on x and x', retrained attackers on x and x').

  mass train --data TRAIN.parquet --val VAL.parquet --suppress colour --preserve digit \\
      --config params.yaml --out runs/colour
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import numpy as np
import torch

from mass.errors import ConfigError, MissingInputError

HELP = "train a data modifier (MaSS or another method) on embedding Parquet"
log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="training Parquet (file, directory or glob)")
    p.add_argument("--val", help="validation Parquet; enables the audit in metrics.json")
    p.add_argument("--id-col", default="id")
    p.add_argument("--emb-col", default="emb")
    p.add_argument("--suppress", help="attributes to suppress, comma-separated (or in --config)")
    p.add_argument("--preserve", help="attributes to preserve, comma-separated (optional)")
    p.add_argument("--method", help="method name (default: config's, else 'mass')")
    p.add_argument("--config", help="params.yaml; its `train:` section (else top level)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--mode", choices=("faithful", "adaptive"), help="MaSS mode override")
    p.add_argument("--epochs", type=int, help="override epochs")
    p.add_argument("--seed", type=int, help="override seed")
    p.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoint.pt")
    p.add_argument("--attackers", default="logreg,mlp",
                   help="retrained attacker families for the --val audit (mass.metrics)")  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    cal = p.add_argument_group(
        "calibration (the default when none of --config, --mode, --method is given; "
        "docs/calibration.md)"
    )
    cal.add_argument("--policy", help="YAML whose `audit:` section is the policy to calibrate "
                     "to (default: ./params.yaml's, else built-in defaults)")  # fmt: skip
    cal.add_argument("--budget-minutes", type=float, default=10.0,
                     help="wall-clock bound of the calibration search (default 10)")  # fmt: skip
    p.add_argument("--max-rows", type=int, default=200_000,
                   help="above this many rows, train on a seeded stratified sample read in a "
                   "streaming pass (default 200000)")  # fmt: skip


def read_params(path: str | None, section: str = "train") -> dict:
    """The ``section`` of a params.yaml (or the whole file when it has no such section)."""
    if not path:
        return {}
    import yaml

    if not os.path.exists(path):
        raise MissingInputError(f"{path}: no such config file; check --config")
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping at top level")
    sub = doc.get(section, doc)
    if not isinstance(sub, dict):
        raise ConfigError(f"{path}: section '{section}' is not a mapping")
    return dict(sub)


def _names(v) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return list(v)


def resolve(args: argparse.Namespace) -> tuple[str, list[str], list[str], dict]:
    """(method, suppress, preserve, params) from --config and the CLI (the CLI wins)."""
    params = read_params(args.config)
    method = args.method or params.pop("method", None) or "mass"
    params.pop("method", None)
    suppress = _names(args.suppress) if args.suppress else _names(params.pop("suppress", None))
    preserve = _names(args.preserve) if args.preserve is not None else _names(
        params.pop("preserve", None))  # fmt: skip
    params.pop("suppress", None)
    params.pop("preserve", None)
    for key in ("mode", "epochs", "seed"):
        if getattr(args, key, None) is not None:
            params[key] = getattr(args, key)
    return method, suppress, preserve, params


def _check_columns(spec: str, suppress: list[str], preserve: list[str]) -> None:
    """ConfigError naming suppress/preserve before any data is read in full."""
    import pyarrow.parquet as pq

    from mass.io import expand_paths

    path = expand_paths(spec)[0]
    try:
        names = set(pq.read_schema(path).names)
    except Exception:  # unreadable files get their own error from load_embeddings
        return
    both = sorted(set(suppress) & set(preserve))
    if both:
        raise ConfigError(f"suppress/preserve: {both} appear in both; an attribute is one")
    for param, attrs in (("suppress", suppress), ("preserve", preserve)):
        for a in attrs:
            if a not in names:
                raise ConfigError(
                    f"{param}: attribute '{a}' is not a label column of {path} "
                    f"(columns: {sorted(names)})"
                )


def _check_out(out: str) -> None:
    """``--out`` is a run directory: a path that exists as anything else is refused up front."""
    if os.path.lexists(out) and not os.path.isdir(out):
        kind = "a symlink to nothing" if os.path.islink(out) else "a file"
        raise ConfigError(
            f"--out {out}: is {kind}, not a run directory; pass a new or existing directory "
            "(nothing was written)"
        )
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"--out {out}: {parent} is a file, not a directory; pass another --out")


def modify(model: torch.nn.Module, x: np.ndarray, seeds: np.ndarray, *, batch: int = 4096):
    """Apply a fitted modifier to numpy rows in batches (eval mode, no grad)."""
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            xb = torch.as_tensor(x[i : i + batch], dtype=torch.float32)
            out.append(model(xb, torch.as_tensor(seeds[i : i + batch])).numpy())
    return np.concatenate(out) if out else np.zeros_like(x)


def run(args: argparse.Namespace) -> int:
    from mass.config import MassConfig, config_hash, validate_attributes
    from mass.io import load_embeddings
    from mass.methods import get_method
    from mass.modifier import save_modifier

    method_name, suppress, preserve, params = resolve(args)
    _check_out(args.out)
    if not suppress:
        raise ConfigError("suppress: empty; pass --suppress or set train.suppress in --config")
    _check_columns(args.data, suppress, preserve)
    train, sample_note = _load_training(args, suppress, preserve)
    validate_attributes(suppress, preserve, train.labels, source=args.data)
    if calibrating(args):
        from mass.calibrate.flow import run_calibrated

        return run_calibrated(args, train, suppress, preserve, sample_note)
    val = None
    if args.val:
        val = load_embeddings(args.val, id_col=args.id_col, emb_col=args.emb_col,
                              label_cols=list(train.labels), encodings=train.encodings,
                              expected_dim=train.x.shape[1])  # fmt: skip
    method = get_method(method_name)
    if method_name == "mass":
        cfg = MassConfig.from_dict({**params, "method": "mass"}, suppress=suppress,
                                   preserve=preserve)  # fmt: skip
        resolved, chash = cfg.to_dict(), cfg.config_hash()
        params = {k: v for k, v in resolved.items() if k not in ("suppress", "preserve")}
    else:
        resolved = {"method": method_name, "suppress": suppress, "preserve": preserve, **params}
        chash = config_hash(resolved)
    os.makedirs(args.out, exist_ok=True)
    kwargs = {}
    if method_name == "mass":
        kwargs = {"run_dir": args.out, "resume": args.resume}
    t0 = time.perf_counter()
    res = method.fit(train, suppress=suppress, preserve=preserve, params=params, val=val,
                     seed=int(params.get("seed", 0)), progress=not args.no_progress,
                     **kwargs)  # fmt: skip
    seconds = time.perf_counter() - t0
    encodings = {a: list(e.classes) for a, e in train.encodings.items()}
    save_modifier(res.modifier, os.path.join(args.out, "modifier.pt"), method=method_name,
                  suppress=suppress, preserve=preserve, config_hash=chash,
                  dim=int(train.x.shape[1]), encodings=encodings)  # fmt: skip
    if method_name != "mass":
        torch.save({"classifiers": {}, "agnostic": None, "method": method_name},
                   os.path.join(args.out, "branches.pt"))  # fmt: skip
    _write_yaml(os.path.join(args.out, "config.yaml"), resolved)
    with open(os.path.join(args.out, "encodings.json"), "w") as f:
        json.dump(encodings, f, indent=2, default=str)
    metrics = {
        "method": method_name, "config_hash": chash, "train_seconds": seconds,
        "epoch_seconds": [h.get("seconds") for h in res.history],
        "history": res.history, "rows": len(train),
    }  # fmt: skip
    if sample_note:
        metrics["sample"] = sample_note
    if val is not None:
        families = tuple(_names(args.attackers))
        metrics["val"] = audit(res, train, val, suppress + preserve, families=families)
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2, default=float)
    log.info("wrote %s (train %.1fs)", args.out, seconds)
    return 0


def calibrating(args: argparse.Namespace) -> bool:
    """Calibrate unless the user said what to train (--config, --mode or --method)."""
    return not (args.config or args.mode or args.method)


def _load_training(args, suppress: list[str], preserve: list[str]):
    from mass.calibrate.sampling import load_training
    from mass.config import CalibrationConfig

    cfg = CalibrationConfig(max_rows=args.max_rows, seed=args.seed or 0)
    return load_training(args.data, id_col=args.id_col, emb_col=args.emb_col,
                         label_cols=list(dict.fromkeys(suppress + preserve)),
                         max_rows=cfg.max_rows, seed=cfg.seed)  # fmt: skip


def audit(res, train, val, attrs: list[str], *, families: tuple[str, ...]) -> dict:
    """Per attribute: majority rate, frozen accuracy on x and x', retrained attackers."""
    from mass import metrics as M
    from mass.branches import LogitsOnly
    from mass.methods.mass import normalize_rows
    from mass.noise import row_seeds

    xtr, xva = normalize_rows(train.x), normalize_rows(val.x)
    # Public row_seeds: this is the training-time audit on data the owner keeps, never
    # released; noise from public seeds is distributed like keyed noise for these attackers.
    mtr = modify(res.modifier, xtr, row_seeds(train.ids))
    mva = modify(res.modifier, xva, row_seeds(val.ids))
    out = {}
    for a in attrs:
        ytr, yva = train.labels[a], val.labels[a]
        row = {"majority": M.majority_rate(yva)}
        clf = res.branches.get(a)
        if clf is not None:
            row["frozen_x"] = M.frozen_accuracy(LogitsOnly(clf), xva, yva)
            row["frozen_xmod"] = M.frozen_accuracy(LogitsOnly(clf), mva, yva)
        row["retrained_x"] = M.retrained_attackers(xtr, ytr, xva, yva, families=families)
        row["retrained_xmod"] = M.retrained_attackers(mtr, ytr, mva, yva, families=families)
        out[a] = row
    return out


def _write_yaml(path: str, d: dict) -> None:
    import yaml

    with open(path, "w") as f:
        yaml.safe_dump({"train": json.loads(json.dumps(d, default=str))}, f, sort_keys=True)
