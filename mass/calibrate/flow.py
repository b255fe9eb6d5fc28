"""The calibration flow of `mass train` (no --config, --mode or --method): read the policy,
calibrate (:mod:`.search`), and write the run directory as for any method plus
calibration.json / calibration.png (docs/calibration.md)."""

from __future__ import annotations

import json
import logging
import os
import time

import torch

log = logging.getLogger(__name__)


def read_policy(path: str | None):
    """(policy, source): the audit's own policy (mass.audit.policy, the gate's) from
    ``path``'s ``audit:`` section, else ./params.yaml's, else the built-in defaults."""
    from mass.audit.policy import AuditPolicy, load_policy

    if path is None and os.path.exists("params.yaml"):
        try:
            import yaml

            with open("params.yaml") as f:
                doc = yaml.safe_load(f) or {}
        except Exception:
            doc = {}
        if isinstance(doc, dict) and isinstance(doc.get("audit"), dict):
            path = "params.yaml"
    if path is None:
        return AuditPolicy(), "built-in defaults"
    return load_policy(path), f"{path} (audit:)"


def run_calibrated(args, train, suppress: list[str], preserve: list[str], sample_note) -> int:
    """`mass train` without an explicit config: search a configuration that meets the policy
    on validation data (mass.calibrate), then write the run directory as for any method."""
    from mass.calibrate.search import calibrate
    from mass.commands.train import _write_yaml
    from mass.config import CalibrationConfig, config_hash
    from mass.io import load_embeddings
    from mass.modifier import save_modifier

    if args.epochs is not None or args.resume:
        log.warning("--epochs/--resume apply to an explicit --config/--mode/--method run; "
                    "calibration chooses its own and ignores them")  # fmt: skip
    policy, source = read_policy(args.policy)
    cfg = CalibrationConfig(budget_minutes=args.budget_minutes, max_rows=args.max_rows,
                            seed=args.seed or 0)  # fmt: skip
    val = None
    if args.val:
        val = load_embeddings(args.val, id_col=args.id_col, emb_col=args.emb_col,
                              label_cols=list(train.labels), encodings=train.encodings,
                              expected_dim=train.x.shape[1])  # fmt: skip
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    res = calibrate(train, suppress=suppress, preserve=preserve, policy=policy, cfg=cfg,
                    val=val, out_dir=args.out, sample_note=sample_note,
                    policy_source=source)  # fmt: skip
    seconds = time.perf_counter() - t0
    chosen = {
        "candidate": res.candidate.name, "method": res.candidate.method,
        "output_noise": res.noise, "report": "calibration.json", "policy": policy.to_dict(), "policy_source": source,
        "seconds": round(seconds, 1),
    }  # fmt: skip
    resolved = {**res.config, "calibration": chosen}
    chash = config_hash(resolved)
    encodings = {a: list(e.classes) for a, e in train.encodings.items()}
    save_modifier(res.modifier, os.path.join(args.out, "modifier.pt"),
                  method=res.candidate.method, suppress=suppress, preserve=preserve,
                  config_hash=chash, dim=int(train.x.shape[1]), encodings=encodings,
                  calibration=chosen)  # fmt: skip
    _save_branches(args.out, res)
    _write_yaml(os.path.join(args.out, "config.yaml"), resolved)
    with open(os.path.join(args.out, "encodings.json"), "w") as f:
        json.dump(encodings, f, indent=2, default=str)
    metrics = {
        "method": res.candidate.method, "config_hash": chash, "train_seconds": seconds,
        "calibration_seconds": seconds, "calibration": chosen,
        "history": res.fit.history, "rows": len(train),
        "val": res.report["chosen"],
    }  # fmt: skip
    if sample_note:
        metrics["sample"] = sample_note
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2, default=float)
    log.info("calibrated %s: %s, output noise %s (%.0fs); report %s/calibration.json",
             args.out, res.candidate.name, res.noise, seconds, args.out)  # fmt: skip
    return 0


def _save_branches(out: str, res) -> None:
    """branches.pt: MaSS's frozen judges where the chosen method has them, else empty."""
    from mass.branches import save_branches

    objs = res.fit.extra.get("branches_obj")
    if objs is not None:
        save_branches(os.path.join(out, "branches.pt"), objs.classifiers, objs.agnostic)
    else:
        torch.save({"classifiers": {}, "agnostic": None, "method": res.candidate.method},
                   os.path.join(out, "branches.pt"))  # fmt: skip
