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

from mass.config import BUDGET_CLOCKS, METHOD_NAMES, MODES
from mass.names import add_column_arguments

HELP = "train a data modifier (MaSS or another method) on embedding Parquet"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="training Parquet (file, directory or glob)")
    p.add_argument("--val", help="validation Parquet; enables the audit in metrics.json")
    add_column_arguments(p)
    p.add_argument("--suppress", help="attributes to suppress, comma-separated (or in --config)")
    p.add_argument("--preserve", help="attributes to preserve, comma-separated (optional)")
    p.add_argument("--method", help=f"method name: one of {', '.join(METHOD_NAMES)} "
                   "(default: config's, else 'mass')")  # fmt: skip
    p.add_argument("--config", help="params.yaml; its `train:` section (else top level)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--mode", choices=MODES, help="MaSS mode override: " + " or ".join(MODES))
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
    cal.add_argument("--watch", help="labelled attributes neither suppressed nor preserved "
                     "whose retention ranks the candidates that pass (default: the policy's "
                     "audit.watch; none: label-free structure ranks them), comma-separated")  # fmt: skip
    cal.add_argument("--budget-minutes", type=float, default=10.0,
                     help="bound of the calibration search, in minutes of --budget-clock "
                     "(default 10)")  # fmt: skip
    cal.add_argument("--budget-clock", choices=BUDGET_CLOCKS, default="cpu",
                     help="cpu (default): CPU minutes of the training process, so waiting on "
                     "a loaded machine does not spend the budget (MaSS fits still cost more "
                     "CPU there); wall: elapsed minutes")  # fmt: skip
    p.add_argument("--transductive", action="store_true",
                   help="the --data rows ARE the rows the release will carry (a batch job that "
                   "knows S for them): candidates are fitted and judged on those rows, the "
                   "transductive repair first, and a transductive model records the rows' id "
                   "digest so `mass anonymize` refuses any other input (docs/calibration.md)")  # fmt: skip
    cal.add_argument("--release-rows", type=int,
                     help="rows of the release the gate will audit, if known: a release "
                     "audited on fewer rows than were validated has wider bounds, and the "
                     "validation margin widens to match (default: as many as validated)")  # fmt: skip
    p.add_argument("--max-rows", type=int, default=200_000,
                   help="above this many rows, train on a seeded stratified sample read in a "
                   "streaming pass (default 200000)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from mass.training import plan_train, train

    return train(plan_train(args))
