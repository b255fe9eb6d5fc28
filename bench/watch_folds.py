"""How far the demo's watch figure moves with the audit's row order alone (docs/demo.md).

The audit samples rows in a keyed order of their ids (mass.audit.scan), so its cross-validation
folds, and every figure they produce, change with the owner key while the release does not.
This releases the demo's held-out rows (``data/heldout``, val + test) in-process with the
trained modifier (``runs/modifier/modifier.pt``, `make demo` first), then reads the watch
attribute with the audit's own reader (:func:`mass.metrics.unnamed.watch_report`: the four
families, 5 folds, the frozen reader, kept = the lower of retrained and frozen) under
``--orders`` seeded permutations of the same rows, and prints each reading and their spread.

    python bench/watch_folds.py [--orders 8] [--watch thickness] [--suppress digit]
        [--run-dir runs/modifier] [--heldout data/heldout]

A deterministic modifier only (the demo's noise-free cells): the release is the same vectors
under every order.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def readings(x, xp, watch, suppressed, orders: int) -> list[dict]:
    """The watch reading under ``orders`` seeded row orders of the same rows."""
    from mass.metrics.rules import FROZEN_READER
    from mass.metrics.unnamed import watch_report

    name = next(iter(watch))
    out = []
    for k in range(orders):
        p = np.random.default_rng(100 + k).permutation(len(x))
        r = watch_report(x[p], xp[p], {name: watch[name][p]},
                         {s: v[p] for s, v in suppressed.items()}, seed=0, max_rows=None,
                         folds=5, frozen=FROZEN_READER)[name]  # fmt: skip
        out.append({"order": k, "kept": round(r["kept"], 4),
                    "original": round(r["original"], 4), "release": round(r["release"], 4)})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--orders", type=int, default=8)
    p.add_argument("--watch", default="thickness")
    p.add_argument("--suppress", default="digit")
    p.add_argument("--run-dir", default="runs/modifier")
    p.add_argument("--heldout", default="data/heldout")
    a = p.parse_args(argv)
    from mass.io import load_embeddings
    from mass.metrics.certificate import cells_of
    from mass.modifiers import load_modifier, modify

    ds = load_embeddings(a.heldout, label_cols=[a.watch, a.suppress])  # every split below it
    model = load_modifier(os.path.join(a.run_dir, "modifier.pt"))
    xp = modify(model, ds.x, np.zeros(len(ds), np.int64))
    rows = readings(ds.x, xp, {a.watch: ds.labels[a.watch]},
                    {a.suppress: ds.labels[a.suppress]}, a.orders)  # fmt: skip
    for r in rows:
        print(json.dumps(r))
    kept = [r["kept"] for r in rows]
    print(json.dumps({"rows": len(ds), "distinct_released": int(cells_of(xp).max()) + 1,
                      "orders": len(kept), "min": min(kept), "max": max(kept),
                      "mean": round(float(np.mean(kept)), 4),
                      "sd": round(float(np.std(kept, ddof=1)), 4) if len(kept) > 1 else None}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
