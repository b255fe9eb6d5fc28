"""The pipeline's DVC plots (dvc.yaml ``plots:``), from calibration.json and audit.json.

    python -m mass.demo.plots --audit reports/audit/audit.json --run-dir runs/modifier \\
        --out metrics/plots

Writes two JSON tables that `dvc plots show` / `dvc plots diff` draw and compare across
experiments:

- ``frontier.json``: one row per calibration point (candidate and release noise level):
  ``utility_kept`` (smallest preserved fraction) and ``privacy_excess`` (worst judge's 95 %
  bound over its baseline), with ``passed``;
- ``learning_curves.json``: per fraction of the attack training set, one column per
  ``role:family`` (``suppressed:logreg``, ...): the retrained attacker's accuracy on the
  release, the highest over the suppressed attributes and the lowest over the preserved ones,
  so the columns are the same whatever the attributes are called (a suppressed curve still
  climbing at 100 % means more data would leak more; docs/audit.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def frontier(calibration: dict) -> list[dict]:
    rows = []
    for p in calibration.get("points") or []:
        if _finite(p.get("fraction")) and _finite(p.get("excess")):
            rows.append({"candidate": str(p.get("candidate")), "noise": p.get("noise"),
                         "utility_kept": round(p["fraction"], 4),
                         "privacy_excess": round(p["excess"], 4),
                         "passed": bool(p.get("passed"))})  # fmt: skip
    return rows


def learning_curves(audit: dict) -> list[dict]:
    by_fraction: dict[float, dict] = {}
    for a in (audit.get("attributes") or {}).values():
        role = a.get("role")
        pick = max if role == "suppressed" else min
        for family, curve in (a.get("learning_curve") or {}).items():
            for point in curve or []:
                if len(point) == 2 and _finite(point[0]) and _finite(point[1]):
                    row = by_fraction.setdefault(point[0], {"train_fraction": point[0]})
                    key, acc = f"{role}:{family}", round(point[1], 4)
                    row[key] = pick(row[key], acc) if key in row else acc
    return [by_fraction[f] for f in sorted(by_fraction)]


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: unreadable ({e}); its plot is left empty", file=sys.stderr)
        return {}


def write(out: str, audit: dict, calibration: dict) -> None:
    os.makedirs(out, exist_ok=True)
    tables = {"frontier.json": frontier(calibration),
              "learning_curves.json": learning_curves(audit)}  # fmt: skip
    for name, rows in tables.items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mass.demo.plots", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--audit", required=True, help="the audit's audit.json")
    p.add_argument("--run-dir", required=True, help="the training run (its calibration.json)")
    p.add_argument("--out", required=True, help="directory for frontier.json, learning_curves.json")
    args = p.parse_args(argv)
    from mass.rundir import CALIBRATION

    write(args.out, _read(args.audit), _read(os.path.join(args.run_dir, CALIBRATION)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
