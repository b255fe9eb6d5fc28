"""The styles case at release size: how much of s do ``ot_repair``'s cells leave, by
resolution, when the attacker holds thousands of release rows (docs/journal/
cells-at-scale-2026-12-02.md; the test is ``tests/mass/methods/test_ot_repair.py::
test_cells_remove_what_the_repair_leaves_at_a_fine_scale_and_keep_u``).

s is a mixture of many tight styles per class (the classes agree at a coarse scale), u is
linear and independent. One fit on ``--fit`` rows per resolution, released on ``--release``
fresh rows of the same styles; every attacker family (and the per-released-vector lookup) is
trained on one half of the release and scored on the other.

    PYTHONPATH=. python bench/cells_styles.py [--fit 2000] [--release 20000] [--rows 0,10,20,50,100]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from mass.methods import get_method
from tests.mass.methods.privacy_cases import attack, release
from tests.mass.methods.test_ot_repair import styles_case


def lookup(r: np.ndarray, s: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """The Bayes rule of a cell release: majority s per distinct released vector."""
    codes = np.unique(r, axis=0, return_inverse=True)[1].reshape(-1)
    table = np.zeros((codes.max() + 1, 2))
    np.add.at(table, (codes[a], s[a]), 1)
    return float((table.argmax(1)[codes[b]] == s[b]).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fit", type=int, default=2000)
    p.add_argument("--release", type=int, default=20000)
    p.add_argument("--rows", default="0,10,20,50,100", help="fit rows per cell (0: no cells)")
    args = p.parse_args()
    torch.set_num_threads(1)
    tr, te = styles_case(fit_rows=args.fit, release_rows=args.release)
    s, half = te.labels["s"], len(te) // 2
    a, b = np.arange(half), np.arange(half, len(te))
    print(json.dumps({"chance": float(np.bincount(s[b]).max() / len(b))}))
    for rows in (int(v) for v in args.rows.split(",")):
        fit = get_method("ot_repair").fit(tr, suppress=["s"], preserve=["u"], seed=0,
                                          progress=False,
                                          params={"cell_rows": rows} if rows else {})  # fmt: skip
        r = release(fit.modifier, te.x, 2)
        row = {"cell_rows": rows, "cells": int(fit.extra.get("cells") or 0),
               "s": attack(r[a], s[a], r[b], s[b]), "lookup": lookup(r, s, a, b)}  # fmt: skip
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
