"""The calibration flow of `mass train` (no --config, --mode or --method): read the policy,
calibrate (:mod:`.search`, which writes calibration.json / calibration.png), and hand back
what :func:`mass.training.write_run` writes as for any method (docs/calibration.md)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from mass.names import split_names

log = logging.getLogger(__name__)


def read_policy(path: str | None):
    """(policy, source): the gate's own default (:func:`mass.audit.policy.resolve_policy`):
    ``path``'s ``audit:`` section, else ./params.yaml's, else the built-in defaults. A
    ./params.yaml the gate would refuse (a misspelt ``audti:``, a duplicate key, bad YAML)
    is refused here too: calibrating to looser defaults than the user wrote is a silent
    wrong result."""
    from mass.audit.policy import resolve_policy

    return resolve_policy(path, flag="--policy")


def resolve_watch(args, suppress, preserve, columns) -> list[str]:
    """The watch attributes that rank calibration's candidates: ``--watch`` (each must be a
    column), else those of the policy's ``audit.watch`` among ``columns`` (ConfigError for
    one that is also suppressed or preserved)."""
    from mass.audit.unnamed import check_watch, effective_watch

    flag = list(split_names(getattr(args, "watch", None)))
    watch = list(effective_watch(flag, read_policy(args.policy)[0].watch, columns or [],
                                 where=args.data))  # fmt: skip
    check_watch(watch, suppress, preserve)
    return watch


def unnamed_summary(unnamed: dict | None) -> dict | None:
    """What calibration.json / config.yaml record of the chosen release's unnamed utility."""
    if not unnamed:
        return None
    return {"utility": unnamed.get("utility"), "by": unnamed.get("by"),
            "watch": {w: r.get("kept") for w, r in (unnamed.get("watch") or {}).items()},
            "structure": {k: unnamed["structure"].get(k)
                          for k in ("knn_overlap", "cka", "dcor")}}  # fmt: skip


@dataclass
class CalibratedRun:
    """What `mass train` writes for a calibrated run (mass.training.write_run's arguments)."""

    modifier: Any  # the chosen fit with the chosen release noise
    branches: Any  # MaSS's frozen judges, or None
    method: str
    resolved: dict
    chash: str
    metrics: dict
    calibration: dict  # the modifier.pt metadata block `mass export` carries


def calibrated_hash(config: dict, chosen: dict) -> str:
    """The config hash of a calibrated run: its configuration and what calibration chose,
    without how long that took (config.yaml and metrics.json keep ``seconds``, the modifier's
    metadata does not): the same data, policy and seed give the same hash, so the same
    modifier bytes, export sha256 and release metadata (a
    `dvc repro -f` that chose the same reproduces them; the release noise is keyed by that
    sha256, so a retrain that changed it would redraw the noise of the same rows)."""
    from mass.config import config_hash

    return config_hash({**config, "calibration": timeless(chosen)})


def timeless(chosen: dict) -> dict:
    """Calibration's choice as the modifier records it: without its ``seconds``."""
    return {k: v for k, v in chosen.items() if k != "seconds"}


def run_calibration(job, train_ds, sample_note, val) -> CalibratedRun:
    """`mass train` without an explicit config (``job``: :class:`mass.training.TrainJob`):
    search a configuration that meets the policy on validation data (writes calibration.json
    / .png into ``job.out``; raises CalibrationError with the frontier when nothing passes)."""
    from mass.calibrate.search import calibrate

    if job.epochs is not None or job.resume:
        log.warning("--epochs/--resume apply to an explicit --config/--mode/--method run; "
                    "calibration chooses its own and ignores them")  # fmt: skip
    policy, source = read_policy(job.policy)
    os.makedirs(job.out, exist_ok=True)
    t0 = time.perf_counter()
    res = calibrate(train_ds, suppress=list(job.suppress), preserve=list(job.preserve),
                    policy=policy, cfg=job.calibration, val=val, out_dir=job.out,
                    sample_note=sample_note, policy_source=source,
                    watch=list(job.watch))  # fmt: skip
    seconds = time.perf_counter() - t0
    chosen = {
        "candidate": res.candidate.name, "method": res.candidate.method,
        "output_noise": res.noise, "report": "calibration.json", "policy": policy.to_dict(),
        "policy_source": source, "seconds": round(seconds, 1), "watch": list(job.watch),
        "unnamed": unnamed_summary(res.report["chosen"].get("unnamed")),
    }  # fmt: skip
    if res.report["chosen"].get("last_resort"):  # the release keeps R and nothing else
        chosen["last_resort"] = res.report["chosen"]["last_resort"]
    resolved = {**res.config, "calibration": chosen}
    chash = calibrated_hash(res.config, chosen)
    metrics = {
        "method": res.candidate.method, "config_hash": chash, "train_seconds": seconds,
        "calibration_seconds": seconds, "calibration": chosen,
        "history": res.fit.history, "rows": len(train_ds),
        "val": res.report["chosen"],
    }  # fmt: skip
    if sample_note:
        metrics["sample"] = sample_note
    log.info("calibrated %s: %s, output noise %s (%.0fs); report %s/calibration.json",
             job.out, res.candidate.name, res.noise, seconds, job.out)  # fmt: skip
    return CalibratedRun(res.modifier, res.fit.extra.get("branches_obj"), res.candidate.method,
                         resolved, chash, metrics, timeless(chosen))  # fmt: skip
