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
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mass.config import CalibrationConfig, check_attribute_names, read_section
from mass.errors import ConfigError
from mass.names import parse_names

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainJob:
    """Every setting of `mass train`, resolved and checked once (:func:`plan_train`). A new
    flag: ``add_arguments`` in :mod:`mass.commands.train`, one field here, its line in
    :func:`plan_train`, then ``job.<field>`` where it is used."""

    data: str
    val: str | None
    id_col: str
    emb_col: str
    out: str
    method: str  # --method, else the config's, else "mass"
    suppress: tuple[str, ...]
    preserve: tuple[str, ...]
    params: Mapping[str, Any]  # the config's train: section with --mode/--epochs/--seed over it
    calibrate: bool  # none of --config, --mode, --method given
    watch: tuple[str, ...]  # --watch, else the policy's audit.watch (ranks calibration)
    epochs: int | None
    seed: int | None
    resume: bool
    attackers: tuple[str, ...]
    progress: bool
    policy: str | None  # --policy (calibration reads it: mass.calibrate.flow.read_policy)
    calibration: CalibrationConfig  # --budget-minutes/--budget-clock/--release-rows/--max-rows


def plan_train(args: argparse.Namespace) -> TrainJob:
    """The plan of `mass train` from its parsed flags and --config; every check that needs
    no data runs here (and the suppress/preserve names against the data's schema)."""
    method, suppress, preserve, params = resolve(args)
    check_out(args.out, inputs={"--data": args.data, "--val": args.val})
    attackers = check_search_flags(args)
    if not suppress:
        raise ConfigError("suppress: empty; pass --suppress or set train.suppress in --config")
    calibrate = not (args.config or args.mode or args.method)
    watch: list[str] = []
    if calibrate:  # watch attributes rank calibration's candidates
        from mass.calibrate.flow import resolve_watch

        watch = resolve_watch(args, suppress, preserve, data_columns(args.data))
    check_columns(args.data, suppress, preserve, watch)
    if args.transductive:
        params = transductive_params(args, method, calibrate, params)
    cfg = CalibrationConfig(budget_minutes=args.budget_minutes, max_rows=args.max_rows,
                            budget_clock=args.budget_clock, release_rows=args.release_rows,
                            seed=args.seed or 0, transductive=args.transductive)  # fmt: skip
    return TrainJob(
        data=args.data,
        val=args.val,
        id_col=args.id_col,
        emb_col=args.emb_col,
        out=args.out,
        method=method,
        suppress=tuple(suppress),
        preserve=tuple(preserve),
        params=MappingProxyType(params),
        calibrate=calibrate,
        watch=tuple(watch),
        epochs=args.epochs,
        seed=args.seed,
        resume=args.resume,
        attackers=attackers,
        progress=not args.no_progress,
        policy=args.policy,
        calibration=cfg,
    )


def transductive_params(args, method: str, calibrate: bool, params: dict) -> dict:
    """--transductive: no --val (the release rows are the validation), and an explicit
    method must be one that fits transductively (ot_repair, then bound to its rows)."""
    if args.val:
        raise ConfigError(f"--val {args.val}: a --transductive run is judged on the release "
                          "rows (--data) themselves; drop --val")  # fmt: skip
    if calibrate:
        return params
    from mass.methods import METHODS, get_method, method_names

    if not get_method(method).fits_transductively():
        able = [n for n in method_names() if METHODS[n].fits_transductively()]
        raise ConfigError(f"--transductive with --method {method}: only {' or '.join(able)} "
                          "fits transductively (bound to its rows); pass --method "
                          f"{' or --method '.join(able)} or drop --transductive")  # fmt: skip
    return {**params, "transductive": True}


def resolve(args: argparse.Namespace) -> tuple[str, list[str], list[str], dict]:
    """(method, suppress, preserve, params) from --config and the CLI (the CLI wins)."""
    params = read_section(args.config)
    method = args.method or params.pop("method", None) or "mass"
    params.pop("method", None)
    suppress = list(
        parse_names(args.suppress, where="--suppress")
        if args.suppress
        else parse_names(params.pop("suppress", None), where="train.suppress")
    )
    preserve = list(
        parse_names(args.preserve, where="--preserve")
        if args.preserve is not None
        else parse_names(params.pop("preserve", None), where="train.preserve")
    )
    params.pop("suppress", None)
    params.pop("preserve", None)
    for key in ("mode", "epochs", "seed"):
        if getattr(args, key, None) is not None:
            params[key] = getattr(args, key)
    return method, suppress, preserve, params


def data_columns(spec: str) -> list[str] | None:
    """The columns of the first file of ``spec`` (None when unreadable: load_embeddings
    then names the problem)."""
    import pyarrow.parquet as pq

    from mass import fs
    from mass.io import expand_paths

    path = expand_paths(spec)[0]
    try:
        with fs.open_input(path) as f:  # local or object store
            return list(pq.read_schema(f).names)
    except Exception:  # noqa: BLE001
        return None


def check_columns(spec: str, suppress: list[str], preserve: list[str],
                  watch: list[str] = ()) -> None:  # fmt: skip
    """ConfigError naming suppress/preserve/watch before any data is read in full."""
    from mass.io import expand_paths

    names = data_columns(spec)
    if names is None:
        return
    path, cols = expand_paths(spec)[0], set(names)
    check_attribute_names(suppress, preserve, cols, source=path, what="columns")
    for w in watch:
        if w not in cols:
            raise ConfigError(f"--watch: attribute '{w}' is not a label column of {path} "
                              f"(columns: {sorted(cols)})")  # fmt: skip


def check_search_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """--attackers names known families (returned); --budget-minutes is a positive number of
    minutes."""
    from mass.metrics.scores import ATTACKER_FAMILIES

    families = parse_names(args.attackers, where="--attackers")
    for family in families:
        if family not in ATTACKER_FAMILIES:
            raise ConfigError(f"--attackers: unknown family {family!r}; choose from "
                              f"{', '.join(ATTACKER_FAMILIES)}")  # fmt: skip
    budget = args.budget_minutes
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise ConfigError(f"--budget-minutes {budget}: must be a positive number of minutes")
    return families


def check_out(out: str, inputs: Mapping[str, str | None] | None = None) -> None:
    """``--out`` is a run directory: a path that exists as anything else is refused up front,
    and so is one that is, or is inside, an input directory (its files would join the data)."""
    from mass.release.ownership import lies_inside

    if not out.strip():
        raise ConfigError(f"--out '{out}': empty; name the run directory to write")
    for flag, path in (inputs or {}).items():
        if path and os.path.isdir(path) and lies_inside(out, path):
            raise ConfigError(f"--out {out}: is inside {flag} {path}; the run's files would be "
                              "read as data there; pass a directory outside it")  # fmt: skip
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


def train(job: TrainJob) -> int:
    """The whole of `mass train` on its plan (see :mod:`mass.commands.train` for the flags)."""
    from mass.config import validate_attributes

    suppress, preserve = list(job.suppress), list(job.preserve)
    train_ds, sample_note = _load_training(job)
    if job.calibration.transductive and sample_note:
        raise ConfigError(f"{job.data}: --transductive fits the release rows themselves, but "
                          f"{len(train_ds)} of them were sampled (--max-rows "
                          f"{job.calibration.max_rows}); raise --max-rows to the input's rows")  # fmt: skip
    validate_attributes(suppress, preserve, train_ds.labels, source=job.data)
    if job.calibrate:
        from mass.calibrate.flow import run_calibration

        run = run_calibration(job, train_ds, sample_note, _load_val(job, train_ds))
        write_run(job.out, run.modifier, run.branches, train_ds, method=run.method,
                  suppress=suppress, preserve=preserve, resolved=run.resolved, chash=run.chash,
                  metrics=run.metrics, calibration=run.calibration)  # fmt: skip
        return 0
    return _train_explicit(job, train_ds, sample_note)


def _train_explicit(job: TrainJob, train_ds, sample_note) -> int:
    """The method and configuration the user named, fitted as they say."""
    from mass.config import config_hash
    from mass.methods import get_method

    suppress, preserve = list(job.suppress), list(job.preserve)
    val = _load_val(job, train_ds)
    method = get_method(job.method)
    hp = method.parse(dict(job.params), suppress=suppress, preserve=preserve)
    resolved = method.resolve(hp, suppress=suppress, preserve=preserve)
    chash = config_hash(resolved)
    made = not os.path.lexists(job.out)
    os.makedirs(job.out, exist_ok=True)
    t0 = time.perf_counter()
    try:
        res = method.fit(train_ds, suppress=suppress, preserve=preserve, params=hp, val=val,
                         progress=job.progress, run_dir=job.out, resume=job.resume)  # fmt: skip
    except BaseException:  # interrupted or failed: a run directory this run made and left
        if made and not os.listdir(job.out):  # empty is removed (a checkpoint is kept)
            os.rmdir(job.out)
        raise
    seconds = time.perf_counter() - t0
    metrics = {
        "method": job.method, "config_hash": chash, "train_seconds": seconds,
        "epoch_seconds": [h.get("seconds") for h in res.history],
        "history": res.history, "rows": len(train_ds),
    }  # fmt: skip
    if sample_note:
        metrics["sample"] = sample_note
    if val is not None:
        metrics["val"] = audit(res, train_ds, val, suppress + preserve, families=job.attackers)
    write_run(job.out, res.modifier, res.extra.get("branches_obj"), train_ds,
              method=job.method, suppress=suppress,
              preserve=preserve, resolved=resolved, chash=chash, metrics=metrics)  # fmt: skip
    log.info("wrote %s (train %.1fs)", job.out, seconds)
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
    # a seeded subsample: on the whole 200k-row sample the judges' epochs cost far more than
    # a LEACE fit (docs/performance.md, "Memory of mass train and mass audit, ...", (***))
    keep = seeded_rows(len(x), ATTACKER_ROWS, seed)
    if keep is not None:
        x, labels = x[keep], {a: labels[a][keep] for a in attributes}
    return pretrain_branches(
        normalize_rows(x), labels, num_classes, cfg, attributes=tuple(attributes), agnostic=False
    ).classifiers


def _load_training(job: TrainJob):
    from mass.calibrate.sampling import load_training

    return load_training(job.data, id_col=job.id_col, emb_col=job.emb_col,
                         label_cols=list(dict.fromkeys(job.suppress + job.preserve + job.watch)),
                         max_rows=job.calibration.max_rows,
                         seed=job.calibration.seed)  # fmt: skip


def _load_val(job: TrainJob, train_ds):
    from mass.io import load_embeddings

    if not job.val:
        return None
    return load_embeddings(job.val, id_col=job.id_col, emb_col=job.emb_col,
                           label_cols=list(train_ds.labels), encodings=train_ds.encodings,
                           expected_dim=train_ds.x.shape[1])  # fmt: skip


def audit(res, train_ds, val, attrs: list[str], *, families: tuple[str, ...]) -> dict:
    """Per attribute: majority rate, frozen accuracy on x and x', retrained attackers."""
    from mass import metrics as M
    from mass.branch_models import LogitsOnly
    from mass.modifiers import modify
    from mass.noise import row_seeds
    from mass.rows import normalize_rows

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
