"""The CPU time of one ``ot_repair`` transport fit (:func:`mass.methods.ot_repair.transport.fit_transport`),
the step calibration's cell candidates spend most of their fits in (docs/performance.md,
"Calibration's fits"), beside the same fit with the column sort it replaced (torch's sort
along the strided columns, every class gathered by a boolean mask): both must give the same
bytes (a digest of the rows transported and of every knot), and the CPU seconds say what the
change saved.

    mass bench transport_fit [--data words/train.parquet --label S] [--rows 10500]
        [--dim 384] [--classes 4] [--repeat 2]

Without ``--data``: seeded Gaussian rows, class means apart. Prints one JSON line per run
with the 1-min load average before and after (a figure counts only below 1.5 on this 2-core
box: docs/performance.md, "Quiet-machine figures first").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import numpy as np
import torch

from bench.entry import main as bench_main


def _rows(args) -> tuple[torch.Tensor, torch.Tensor, int]:
    if args.data:
        from mass.io import load_embeddings
        from mass.methods._common import unit_x

        ds = load_embeddings(args.data, label_cols=[args.label])
        x, y = unit_x(ds)[: args.rows], torch.as_tensor(ds.labels[args.label][: args.rows])
        return x, y.long(), int(y.max()) + 1
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, args.classes, (args.rows,), generator=g)
    means = torch.randn(args.classes, args.dim, generator=g)
    x = torch.randn(args.rows, args.dim, generator=g) + means[y]
    return x / x.norm(dim=1, keepdim=True), y, args.classes


def _masked_sort_fit(x, cls, classes, gen, p):
    """The transport fit as it was before the change: per step, each class gathered by a
    boolean mask, its knots from torch's sort along dim 0, mapped, scattered back."""
    from mass.methods.ot_repair.transport import discriminant_rotation, rotation
    from mass.modifiers.sliced_repair import Transport, quantile_map

    def knots(y, q):
        ys = y.sort(dim=0).values
        pos = torch.linspace(0, len(y) - 1, q, dtype=torch.float64)
        lo, hi = pos.floor().long(), pos.ceil().long()
        t = (pos - lo).to(y.dtype)[:, None]
        return (ys[lo] * (1 - t) + ys[hi] * t).T.contiguous()

    cur, d, q = x.double(), x.shape[1], p.knots
    rotations, center_knots = torch.empty(p.steps, d, d), torch.empty(p.steps, d, q)
    class_knots = torch.empty(p.steps, classes, d, q)
    counts = torch.bincount(cls, minlength=classes)
    present = [c for c in range(classes) if counts[c] > 0]
    weights = counts.double() / counts.sum()
    for j in range(p.steps):
        informed = p.informed and j % 2 == 0
        rot = discriminant_rotation(cur, cls, present, weights) if informed else rotation(d, gen)
        rot = rot.flip(1) if informed else rot
        y = cur @ rot
        per_class = {c: knots(y[cls == c], q) for c in present}
        center = sum(weights[c] * per_class[c] for c in present)
        out = torch.empty_like(y)
        for c in range(classes):
            class_knots[j, c] = per_class.get(c, center).float()
            rows = cls == c
            if bool(rows.any()):
                out[rows] = quantile_map(y[rows].T.contiguous(), per_class[c], center).T
        rotations[j], center_knots[j] = rot.float(), center.float()
        cur = out @ rot.T
    return Transport(rotations, class_knots, center_knots), cur.float()


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--data", help="a Parquet embedding dataset (id, emb, labels)")
    ap.add_argument("--label", default="S", help="the class label of --data")
    ap.add_argument("--rows", type=int, default=10_500)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)


def run(args: argparse.Namespace) -> int:
    from mass.methods.ot_repair.params import RepairParams
    from mass.methods.ot_repair.transport import fit_transport

    x, y, k = _rows(args)
    p = RepairParams()
    fits = (("numpy_sort_runs", fit_transport), ("torch_sort_masks", _masked_sort_fit))
    for _ in range(args.repeat):
        for name, fit in fits:
            load0 = os.getloadavg()[0]
            c0, w0 = time.process_time(), time.perf_counter()
            tr, out = fit(x, y, k, torch.Generator().manual_seed(0), p)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            h = hashlib.sha256()
            for a in (out, tr.rotations, tr.class_knots, tr.center_knots):
                h.update(np.ascontiguousarray(a.numpy()).tobytes())
            print(json.dumps({"fit": name, "rows": len(x), "dim": x.shape[1], "classes": k,
                              "cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2),
                              "threads": torch.get_num_threads(), "sha256": h.hexdigest()[:16],
                              "load_before": load0, "load_after": os.getloadavg()[0]}))  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    return bench_main(__file__, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
