"""A notebook's route, as a script: a DataFrame in, fit, transform, audit, export.

    python examples/notebook.py --workdir /tmp/mass-example

Writes WORKDIR/triton_models/mine (the signed model `mass anonymize` and examples/beam_jsonl.py
serve), WORKDIR/report/report.html (the audit page, what a notebook shows for ``report``),
and the held-out rows for the Beam example: WORKDIR/heldout.jsonl, WORKDIR/labels.parquet.
Exits 1 when the audit fails: measured, LEACE leaves ``s`` readable to the audit's kNN and
MLP attackers on these rows, and the report says so (the Beam example's gate then refuses).
Needs the owner key (`mass keygen FILE`; $MASS_NOISE_KEY_FILE / $MASS_SIGNING_KEY_FILE, or
.mass/local.yaml). The data is synthetic: 16-d rows whose attribute ``s`` is a direction.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pandas as pd

from mass.api import Suppressor, audit_release
from mass.synthetic import make_synthetic


def frame(n: int = 4000, seed: int = 7) -> pd.DataFrame:
    """id, emb (a list per row) and the labels s and u, like a table read from a warehouse."""
    ds = make_synthetic(n, 16, rho=0.0, sep_s=1.5, seed=seed)
    return pd.DataFrame({"id": np.arange(n) * 3 + 11, "emb": list(ds.x), "s": ds.labels["s"],
                         "u": ds.labels["u"]})  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--method", default="leace",
                    help="an explicit method (quick); '' calibrates to the audit policy as "
                    "`mass train` does (minutes, and more rows than this example has)")  # fmt: skip
    args = ap.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    df = frame()
    train, held = df.iloc[:2000], df.iloc[2000:]

    # fit: `mass train` (an explicit method here; no method= calibrates to the audit policy)
    sup = Suppressor(suppress="s", preserve="u", method=args.method or None)
    sup.fit(train[["id", "emb"]], train[["s", "u"]])
    print(sup.summary())

    # transform: the rows `mass anonymize` would release for these ids (id + emb only)
    released = sup.transform(held[["id", "emb"]])

    # audit: `mass audit` of those rows; in a notebook, `report` renders as report.html
    report = audit_release(released, held[["id", "emb", "s", "u"]], suppress="s",
                           preserve="u", model=sup,
                           report_dir=os.path.join(args.workdir, "report"))  # fmt: skip
    print(report)

    # export: the signed Triton model (the owner key signs it)
    print(json.dumps(sup.export(os.path.join(args.workdir, "triton_models"), "mine")))

    # the held-out rows as JSON lines and their labels, for examples/beam_jsonl.py
    with open(os.path.join(args.workdir, "heldout.jsonl"), "w") as f:
        for row in held[["id", "emb"]].itertuples(index=False):
            f.write(json.dumps({"id": int(row.id), "emb": [float(v) for v in row.emb]}) + "\n")
    held.to_parquet(os.path.join(args.workdir, "labels.parquet"))
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
