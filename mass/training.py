"""`mass train` behind its argparse: resolve the configuration, fit (or calibrate), write RUN_DIR.

RUN_DIR gets modifier.pt, branches.pt, config.yaml (resolved), encodings.json and
metrics.json (train seconds, per-epoch seconds; with --val the audit of each attribute:
majority rate, frozen accuracy on x and x', retrained attackers on x and x'). Every method is
handled alike through :class:`mass.methods.base.Method` (``resolve`` gives the resolved
configuration, ``fit`` the modifier); only calibration (:mod:`mass.calibrate`) differs.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

from mass.config import check_attribute_names, read_section
from mass.errors import ConfigError

log = logging.getLogger(__name__)


def names(v: Any) -> list[str]:
    """A comma-separated string or a list as a list of names."""
    if v is None:
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return list(v)


def resolve(args: argparse.Namespace) -> tuple[str, list[str], list[str], dict]:
    """(method, suppress, preserve, params) from --config and the CLI (the CLI wins)."""
    params = read_section(args.config)
    method = args.method or params.pop("method", None) or "mass"
    params.pop("method", None)
    suppress = names(args.suppress) if args.suppress else names(params.pop("suppress", None))
    preserve = names(args.preserve) if args.preserve is not None else names(
        params.pop("preserve", None))  # fmt: skip
    params.pop("suppress", None)
    params.pop("preserve", None)
    for key in ("mode", "epochs", "seed"):
        if getattr(args, key, None) is not None:
            params[key] = getattr(args, key)
    return method, suppress, preserve, params


def check_columns(spec: str, suppress: list[str], preserve: list[str]) -> None:
    """ConfigError naming suppress/preserve before any data is read in full."""
    import pyarrow.parquet as pq

    from mass import fs
    from mass.io import expand_paths

    path = expand_paths(spec)[0]
    try:
        with fs.open_input(path) as f:  # local or object store
            cols = set(pq.read_schema(f).names)
    except Exception:  # unreadable files get their own error from load_embeddings
        return
    check_attribute_names(suppress, preserve, cols, source=path, what="columns")


def check_out(out: str) -> None:
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


def calibrating(args: argparse.Namespace) -> bool:
    """Calibrate unless the user said what to train (--config, --mode or --method)."""
    return not (args.config or args.mode or args.method)


def train(args: argparse.Namespace) -> int:
    """The whole of `mass train` (see :mod:`mass.commands.train` for the flags)."""
    from mass.config import config_hash, validate_attributes
    from mass.methods import get_method

    method_name, suppress, preserve, params = resolve(args)
    check_out(args.out)
    if not suppress:
        raise ConfigError("suppress: empty; pass --suppress or set train.suppress in --config")
    check_columns(args.data, suppress, preserve)
    train_ds, sample_note = _load_training(args, suppress, preserve)
    validate_attributes(suppress, preserve, train_ds.labels, source=args.data)
    if calibrating(args):
        from mass.calibrate.flow import run_calibration

        run = run_calibration(args, train_ds, suppress, preserve, sample_note,
                              _load_val(args, train_ds))  # fmt: skip
        write_run(args.out, run.modifier, run.branches, train_ds, method=run.method,
                  suppress=suppress, preserve=preserve, resolved=run.resolved, chash=run.chash,
                  metrics=run.metrics, calibration=run.calibration)  # fmt: skip
        return 0
    val = _load_val(args, train_ds)
    method = get_method(method_name)
    hp = method.parse(params, suppress=suppress, preserve=preserve)
    resolved = method.resolve(hp, suppress=suppress, preserve=preserve)
    chash = config_hash(resolved)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    res = method.fit(train_ds, suppress=suppress, preserve=preserve, params=hp, val=val,
                     progress=not args.no_progress, run_dir=args.out,
                     resume=args.resume)  # fmt: skip
    seconds = time.perf_counter() - t0
    metrics = {
        "method": method_name, "config_hash": chash, "train_seconds": seconds,
        "epoch_seconds": [h.get("seconds") for h in res.history],
        "history": res.history, "rows": len(train_ds),
    }  # fmt: skip
    if sample_note:
        metrics["sample"] = sample_note
    if val is not None:
        families = tuple(names(args.attackers))
        metrics["val"] = audit(res, train_ds, val, suppress + preserve, families=families)
    write_run(args.out, res.modifier, res.extra.get("branches_obj"), train_ds,
              method=method_name, suppress=suppress,
              preserve=preserve, resolved=resolved, chash=chash, metrics=metrics)  # fmt: skip
    log.info("wrote %s (train %.1fs)", args.out, seconds)
    return 0


def write_run(out: str, modifier, branches, train_ds, *, method: str, suppress: list[str],
              preserve: list[str], resolved: dict, chash: str, metrics: dict,
              **meta: Any) -> None:  # fmt: skip
    """The run directory (:mod:`mass.rundir`): ``branches`` are MaSS's frozen judges; methods
    without get the paper's frozen judges trained here."""
    from mass import rundir

    if branches is not None:
        classifiers, agnostic = branches.classifiers, branches.agnostic
    else:
        # Methods that train no judges of their own (the erasers, the baselines) still get the
        # paper's frozen judges: one classifier per named attribute on the original rows, so
        # the audit reports frozen numbers beside the retrained attackers for every release.
        classifiers = frozen_judges(train_ds, list(dict.fromkeys(suppress + preserve)))
        agnostic = None
    encodings = {a: list(e.classes) for a, e in train_ds.encodings.items()}
    rundir.write(out, modifier, classifiers, agnostic, encodings=encodings, resolved=resolved,
                 metrics=metrics, method=method, suppress=suppress, preserve=preserve,
                 config_hash=chash, dim=int(train_ds.x.shape[1]), **meta)  # fmt: skip


# Rows the frozen judges and metrics.json's retrained attackers train on at most (seeded
# subsample; the audit policy's default max_rows)
ATTACKER_ROWS = 20_000


def frozen_judges(train_ds, attributes: list[str], *, epochs: int = 10, seed: int = 0) -> dict:
    """The paper's protocol judges: one frozen classifier per attribute on the original rows
    (MaSS's own branch pretraining, :func:`mass.methods.mass.pretrain_branches`)."""
    from mass.config import MassConfig
    from mass.methods.mass import pretrain_branches
    from mass.rows import normalize_rows, seeded_rows

    cfg = MassConfig.from_dict({"method": "mass", "branch_epochs": epochs, "seed": seed},
                               suppress=list(attributes), preserve=[])  # fmt: skip
    num_classes = {a: train_ds.num_classes(a) for a in attributes}
    x, labels = train_ds.x, train_ds.labels
    # measured: 10 epochs x 2 judges on a 200k-row sample were ~1,000 CPU-s (5 CPU-s per
    # epoch per 20k rows), more than a LEACE fit by far
    keep = seeded_rows(len(x), ATTACKER_ROWS, seed)
    if keep is not None:
        x, labels = x[keep], {a: labels[a][keep] for a in attributes}
    return pretrain_branches(normalize_rows(x), labels, num_classes, cfg,
                             attributes=tuple(attributes), agnostic=False).classifiers


def _load_training(args, suppress: list[str], preserve: list[str]):
    from mass.calibrate.sampling import load_training
    from mass.config import CalibrationConfig

    cfg = CalibrationConfig(max_rows=args.max_rows, seed=args.seed or 0)
    return load_training(args.data, id_col=args.id_col, emb_col=args.emb_col,
                         label_cols=list(dict.fromkeys(suppress + preserve)),
                         max_rows=cfg.max_rows, seed=cfg.seed)  # fmt: skip


def _load_val(args, train_ds):
    from mass.io import load_embeddings

    if not args.val:
        return None
    return load_embeddings(args.val, id_col=args.id_col, emb_col=args.emb_col,
                           label_cols=list(train_ds.labels), encodings=train_ds.encodings,
                           expected_dim=train_ds.x.shape[1])  # fmt: skip


def audit(res, train_ds, val, attrs: list[str], *, families: tuple[str, ...]) -> dict:
    """Per attribute: majority rate, frozen accuracy on x and x', retrained attackers."""
    from mass import metrics as M
    from mass.branch_models import LogitsOnly
    from mass.modifiers import modify, normalize_rows
    from mass.noise import row_seeds

    xtr, xva = normalize_rows(train_ds.x), normalize_rows(val.x)
    # Public row_seeds: this is the training-time audit on data the owner keeps, never
    # released; noise from public seeds is distributed like keyed noise for these attackers.
    mtr = modify(res.modifier, xtr, row_seeds(train_ds.ids))
    mva = modify(res.modifier, xva, row_seeds(val.ids))
    out = {}
    for a in attrs:
        ytr, yva = train_ds.labels[a], val.labels[a]
        row: dict[str, Any] = {"majority": M.majority_rate(yva)}
        clf = res.branches.get(a)
        if clf is not None:
            row["frozen_x"] = M.frozen_accuracy(LogitsOnly(clf), xva, yva)
            row["frozen_xmod"] = M.frozen_accuracy(LogitsOnly(clf), mva, yva)
        # seeded subsample like the audit policy's default max_rows: on a 200k-row sample the
        # MLP / kNN fits on every row took the run past half an hour on 2 loaded cores
        row["retrained_x"] = M.retrained_attackers(xtr, ytr, xva, yva, families=families,
                                                   max_rows=ATTACKER_ROWS)  # fmt: skip
        row["retrained_xmod"] = M.retrained_attackers(mtr, ytr, mva, yva, families=families,
                                                      max_rows=ATTACKER_ROWS)  # fmt: skip
        out[a] = row
    return out



