"""The training run directory (``mass train --out RUN_DIR``): its one owner.

    RUN_DIR/modifier.pt       the modifier (:mod:`mass.modifiers.store` format)
    RUN_DIR/branches.pt       frozen judges: one classifier per attribute (+ MaSS's agnostic
                              model), :mod:`mass.branch_models` format
    RUN_DIR/config.yaml       the resolved training config (``train:``)
    RUN_DIR/encodings.json    class labels per attribute, in code order
    RUN_DIR/metrics.json      what training measured (method, calibration's choice, seconds)
    RUN_DIR/calibration.json  the calibration's frontier and verdict (mass.calibrate.report)

Training writes it through :func:`write`; the audit, the export and the demo's metrics read it
through :func:`load_judges` and :func:`read_metrics`. This module imports no training code
(methods, trainer, losses, calibration, branch training): tests/layout/test_audit_imports.py.
"""

from __future__ import annotations

import json
import os

from mass import fs
from mass.errors import MissingInputError, UnreadableInputError

MODIFIER = "modifier.pt"
BRANCHES = "branches.pt"
CONFIG = "config.yaml"
ENCODINGS = "encodings.json"
METRICS = "metrics.json"
CALIBRATION = "calibration.json"


def write(out: str, modifier, classifiers: dict, agnostic, *, encodings: dict[str, list],
          resolved: dict, metrics: dict, **modifier_meta) -> None:  # fmt: skip
    """Every file of a run but calibration's (``modifier_meta``: :func:`save_modifier`'s)."""
    import yaml

    from mass.branch_models import save_branches
    from mass.modifiers import save_modifier

    save_modifier(modifier, os.path.join(out, MODIFIER), encodings=encodings, **modifier_meta)
    save_branches(os.path.join(out, BRANCHES), classifiers, agnostic)
    with open(os.path.join(out, CONFIG), "w") as f:
        yaml.safe_dump({"train": json.loads(json.dumps(resolved, default=str))}, f,
                       sort_keys=True)  # fmt: skip
    with open(os.path.join(out, ENCODINGS), "w") as f:
        json.dump(encodings, f, indent=2, default=str)
    with open(os.path.join(out, METRICS), "w") as f:
        json.dump(metrics, f, indent=2, default=float)


def load_judges(run_dir: str) -> tuple[dict, dict]:
    """(frozen branch classifiers by attribute, class encodings) of a run: the audit's judges."""
    path = os.path.join(run_dir, BRANCHES)
    if not os.path.exists(path):
        raise MissingInputError(f"{path}: no {BRANCHES} in the run directory; check --run-dir")
    from mass.branch_models import load_branches

    classifiers, _agnostic = load_branches(path)
    enc_path = os.path.join(run_dir, ENCODINGS)
    encodings = {}
    if os.path.exists(enc_path):
        encodings = _json(enc_path)
    return classifiers, encodings


def read_metrics(run_dir: str) -> dict:
    """RUN_DIR/metrics.json."""
    return _json(os.path.join(run_dir, METRICS))


def _json(path: str) -> dict:
    return fs.read_json_object(
        path, remedy="re-run `mass train` into this directory", error=UnreadableInputError
    )
