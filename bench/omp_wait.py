"""What torch's OpenMP threads cost on a busy machine: one ``ot_repair`` fit (calibration's
certified-cells candidate on :func:`mass.synthetic.make_synthetic` rows, 384-d) timed in a
child process under each ``OMP_WAIT_POLICY`` (unset: libgomp's default, whose idle threads
spin; ``PASSIVE``: they sleep, what the `mass` command sets unless the environment says
otherwise), beside ``--hogs`` busy-looping processes (0: an idle machine; 1 on a 2-core box:
another job beside it).

    python bench/omp_wait.py --hogs 0,1 --repeat 2 --out reports/omp_wait.json

Per run: CPU seconds of the child's fit (every thread) and its wall seconds, the policy the
child saw, the 1-minute load before it starts. Calibration's budget is read in CPU seconds (docs/
calibration.md, "The budget's clock"), so CPU a thread spends waiting for work is budget the
search loses. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/omp_wait.py`: import mass/ from this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PARAMS = {"cell_rows": 10, "cell_count": 40, "cell_axes": 2, "cells_by_preserved": True,
          "cell_edges": "common", "cell_basis": "within_s", "passes": 1}  # fmt: skip


def child(rows: int, dim: int) -> dict:
    """Fit once (torch at its default threads) and report CPU and wall seconds of the fit."""
    from mass.methods import get_method
    from mass.synthetic import make_synthetic

    data = make_synthetic(rows, dim, u_classes=5, s_name="S", u_name="R")
    t, w = time.process_time(), time.perf_counter()
    get_method("ot_repair").fit(data, suppress=["S"], preserve=["R"], params=dict(PARAMS),
                                progress=False)  # fmt: skip
    cpu, wall = round(time.process_time() - t, 2), round(time.perf_counter() - w, 2)
    return {"cpu": cpu, "wall": wall, "env": os.environ.get("OMP_WAIT_POLICY")}  # libgomp read


def _hog() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hogs", default="0,1", help="busy processes beside the fit, per setting")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rows", type=int, default=7000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--out")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.rows, args.dim)))
        return 0
    runs = []
    for hogs in [int(h) for h in args.hogs.split(",")]:
        procs = [_hog() for _ in range(hogs)]
        try:
            time.sleep(2 if hogs else 0)
            for _ in range(args.repeat):
                for policy in ("default", "PASSIVE"):
                    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
                    if policy != "default":
                        env["OMP_WAIT_POLICY"] = policy
                    load = os.getloadavg()[0]
                    out = subprocess.run([sys.executable, __file__, "--child", "--rows",
                                          str(args.rows), "--dim", str(args.dim)], env=env,
                                         check=True, capture_output=True, text=True)  # fmt: skip
                    run = {"hogs": hogs, "omp_wait_policy": policy, "load_before": load,
                           **json.loads(out.stdout.strip().splitlines()[-1])}  # fmt: skip
                    print(json.dumps(run), flush=True)
                    runs.append(run)
        finally:
            for p in procs:
                p.kill()
    doc = {"cpus": os.cpu_count(), "rows": args.rows, "dim": args.dim, "params": PARAMS,
           "runs": runs}  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
